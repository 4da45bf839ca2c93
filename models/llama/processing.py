"""Inputs of Llama-family models: the tokenizer and its chat template, one segment at a time.

SmolLM2 uses ChatML (`<|im_start|>role\\n...<|im_end|>\\n`) and injects a default system
prompt when the first message is not a system message; Llama 3 ends turns with
`<|eot_id|>`. Both render each message independently, which per-segment rendering needs.
"""

from models.chat_template import TemplateChatProcessor

__all__ = ["LlamaProcessor"]

# End-of-turn tokens of the Llama-family chat formats, added to the tokenizer's EOS when present.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>")


class LlamaProcessor(TemplateChatProcessor):
    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer, extra_stop_tokens=END_OF_TURN)
