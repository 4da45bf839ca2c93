"""Render a Hugging Face chat template one message at a time.

The engine never re-renders a conversation: each appended message is rendered once,
as the difference between the template applied to (anchor, message) and to (anchor)
alone, where the anchor is a fixed system message. For templates that render each
message independently (ChatML, Llama 3) this yields exactly the text, and so the
tokens, that rendering the whole history would give; the test suite checks it
token for token. The first message is rendered on its own, so a template's default
system prompt (SmolLM2 injects one) appears exactly as in a full rendering.
"""

from models.base import ChatProcessor, Segment
from tools.errors import DossierError

__all__ = ["TemplateChatProcessor"]

_ANCHOR = {"role": "system", "content": "anchor"}
_MARK = "\u2063CONTENT\u2063"  # cannot occur in a template's own text


class TemplateChatProcessor(ChatProcessor):
    """Per-segment rendering for any tokenizer whose chat template renders messages independently."""

    def __init__(self, tokenizer, extra_stop_tokens: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        stops = set()
        eos = tokenizer.eos_token_id
        for token in (eos if isinstance(eos, list) else [eos]):
            if token is not None:
                stops.add(int(token))
        vocab = tokenizer.get_vocab()
        stops.update(vocab[t] for t in extra_stop_tokens if t in vocab)
        self._stop_token_ids = stops
        self._anchor_text: str | None = None
        self._generation_prompt: list[int] | None = None
        self._turn_suffix: list[int] | None = None

    @property
    def stop_token_ids(self) -> set[int]:
        return set(self._stop_token_ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise DossierError("this model's tokenizer has no chat template; append token ids with session.append()")
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt
            )
        except Exception as err:  # jinja raises for roles a template refuses
            roles = ", ".join(m["role"] for m in messages)
            raise DossierError(f"the chat template cannot render messages with roles [{roles}]: {err}") from None

    def _after_anchor(self, messages: list[dict], generation_prompt: bool = False) -> str:
        if self._anchor_text is None:
            self._anchor_text = self._render([_ANCHOR])
        text = self._render([_ANCHOR, *messages], generation_prompt)
        if not text.startswith(self._anchor_text):
            raise DossierError("this chat template re-renders earlier messages; it cannot be rendered per segment")
        return text[len(self._anchor_text) :]

    def render_message(self, role: str, content: str, *, first: bool) -> Segment:
        if not isinstance(content, str):
            raise DossierError(f"message content must be a string (got {type(content).__name__})")
        message = {"role": role, "content": content}
        text = self._render([message]) if first else self._after_anchor([message])
        return Segment(self.encode(text))

    def generation_prompt(self) -> Segment:
        if self._generation_prompt is None:
            self._generation_prompt = self.encode(self._after_anchor([], generation_prompt=True))
        return Segment(list(self._generation_prompt))

    def close_turn(self, generated: list[int]) -> Segment:
        if self._turn_suffix is None:
            opening = self.tokenizer.decode(self.generation_prompt().token_ids)
            rendered = self._after_anchor([{"role": "assistant", "content": _MARK}])
            head, _, suffix = rendered.partition(_MARK)
            if head != opening:
                raise DossierError("this chat template's assistant turn does not start with its generation prompt")
            self._turn_suffix = self.encode(suffix)
        suffix = list(self._turn_suffix)
        if generated and suffix and generated[-1] == suffix[0]:
            suffix = suffix[1:]  # the model already emitted the end-of-turn token
        return Segment(suffix)
