"""Inputs of text families: the model folder's tokenizer and chat template, one segment at a time.

SmolLM2 uses ChatML (`<|im_start|>role\\n...<|im_end|>\\n`) and injects a default system
prompt when the first message is not a system message; Llama 3 ends turns with
`<|eot_id|>`; Gemma with `<end_of_turn>`. The family lists its end-of-turn tokens; they
join the tokenizer's EOS as stop tokens when the vocabulary has them.
"""

from dataclasses import dataclass
from pathlib import Path

from models.chat_template import TemplateChatProcessor

__all__ = ["END_OF_TURN", "TextInputs"]

# End-of-turn tokens of the ChatML and Llama chat formats.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>")

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


@dataclass(frozen=True, slots=True)
class TextInputs:
    """The processor factory of a text family."""

    stop_tokens: tuple[str, ...] = END_OF_TURN  # end-of-turn tokens besides the tokenizer's EOS

    def processor(self, tokenizer) -> TemplateChatProcessor:
        """The chat processor over a loaded tokenizer."""
        return TemplateChatProcessor(tokenizer, extra_stop_tokens=self.stop_tokens)

    def build(self, config, folder: Path | None, min_pixels: int | None = None,
              max_pixels: int | None = None) -> tuple[TemplateChatProcessor | None, None]:
        """(the folder's chat processor, or None when it has no tokenizer; no image processor)."""
        if folder is None or not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            return None, None
        from transformers import AutoTokenizer

        return self.processor(AutoTokenizer.from_pretrained(folder)), None
