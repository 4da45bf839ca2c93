"""Token ids of a training pair, rendered the way the engine builds an episode's conversation.

The engine appends each message rendered on its own (`ChatProcessor.render_message`), opens
the assistant turn with the generation prompt, appends the generated tokens and closes the
turn with the template's suffix before the next message (`engine.core.session.Session`).
Training sees the same token ids, so what the adapter learns is what the engine will feed it:
a prompt rendered any other way (say, the whole chat template at once) could differ in the
injected default system prompt or in whitespace, and the tuned model would meet inputs it was
never trained on.
"""

from __future__ import annotations

from engine.train.pairs import QueryPair

__all__ = ["render_prompt", "render_target", "encode_pair"]


def render_prompt(processor, messages: list[tuple[str, str]]) -> list[int]:
    """Token ids of a conversation ending with an open assistant turn, as an engine session holds them.

    Args:
        processor: the model's `ChatProcessor` (`engine.processor`, `adapter.processor`).
        messages: (role, content); an "assistant" entry is a model turn (its generated text).
    """
    ids: list[int] = []
    for i, (role, content) in enumerate(messages):
        if role == "assistant":
            generated = processor.encode(content)
            ids += generated + processor.close_turn(generated).token_ids
            continue
        ids += processor.render_message(role, content, first=not ids).token_ids
        if i + 1 == len(messages) or messages[i + 1][0] == "assistant":
            ids += processor.generation_prompt().token_ids
    return ids


def render_target(processor, text: str) -> list[int]:
    """Token ids the model should generate: the text, then the token that ends its turn."""
    generated = processor.encode(text)
    closing = processor.close_turn(generated).token_ids
    stop = [closing[0]] if closing and closing[0] in processor.stop_token_ids else []
    if not stop:  # a template without an end-of-turn token: the tokenizer's EOS ends the turn
        stop = sorted(processor.stop_token_ids)[:1]
    return generated + stop


def encode_pair(processor, pair: QueryPair, max_tokens: int | None = None) -> dict | None:
    """{"input_ids", "labels", "prompt_tokens"} with the prompt masked out of the loss (-100).

    Returns None when prompt and target exceed `max_tokens` (cutting the prompt would train
    on a conversation the engine never shows the model).
    """
    prompt = render_prompt(processor, pair.messages)
    target = render_target(processor, pair.target)
    if max_tokens is not None and len(prompt) + len(target) > max_tokens:
        return None
    return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target, "prompt_tokens": len(prompt)}
