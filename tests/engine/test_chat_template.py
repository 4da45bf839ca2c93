"""Per-segment chat rendering gives exactly the tokens of rendering the whole history."""

import pytest

from models.text_inputs import TextInputs
from tools.errors import DossierError

CONVERSATIONS = [
    [("user", "What was the revenue in 2019?")],
    [("system", "You are a document agent."), ("user", "Find the revenue."), ("assistant", '{"name": "search"}'),
     ("tool", "page 3: revenue of $1,577 million"), ("assistant", "The revenue was $1,577 million."),
     ("user", "Thanks!")],
    [("user", "hi"), ("assistant", "hello"), ("user", "again\nwith a newline")],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_segments_concatenate_to_the_full_rendering(tokenizer, messages):
    processor = TextInputs().processor(tokenizer)
    ids = []
    for i, (role, content) in enumerate(messages):
        ids += processor.render_message(role, content, first=i == 0).token_ids
    ids += processor.generation_prompt().token_ids
    full = tokenizer.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages], tokenize=False, add_generation_prompt=True
    )
    assert ids == tokenizer(full, add_special_tokens=False)["input_ids"]


def test_default_system_prompt_is_injected_once(tokenizer):
    processor = TextInputs().processor(tokenizer)
    first = tokenizer.decode(processor.render_message("user", "hi", first=True).token_ids)
    later = tokenizer.decode(processor.render_message("user", "hi", first=False).token_ids)
    assert "You are a helpful AI assistant named SmolLM" in first
    assert later == "<|im_start|>user\nhi<|im_end|>\n"


def test_close_turn_completes_the_assistant_message(tokenizer):
    processor = TextInputs().processor(tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert processor.close_turn([5, 6, im_end]).token_ids == newline  # the model ended its turn itself
    assert processor.close_turn([5, 6]).token_ids == [im_end] + newline  # cut by max tokens or a grammar
    assert im_end in processor.stop_token_ids


def test_session_turns_match_full_rendering(tiny_llama, tokenizer):
    """A session's tokens after generate + append equal the template applied to the decoded history."""
    from engine import Engine, EngineConfig, SamplingParams

    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256))
    session = engine.open_session()
    session.append_message("user", "Find the revenue.")
    session.append_generation_prompt()
    start = session.num_tokens
    reply = session.generate(SamplingParams(max_new_tokens=5, ignore_eos=True))
    session.append_message("tool", "page 3: revenue")
    session.append_generation_prompt()
    generated = reply.output_token_ids
    assert session.token_ids[start : start + len(generated)] == generated
    tail = session.token_ids[start + len(generated) :]
    expected_tail = tokenizer(
        "<|im_end|>\n<|im_start|>tool\npage 3: revenue<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )["input_ids"]
    assert tail == expected_tail


def test_template_without_chat_support_is_a_clear_error(tokenizer):
    import copy

    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(DossierError, match="no chat template"):
        TextInputs().processor(bare).render_message("user", "hi", first=True)
