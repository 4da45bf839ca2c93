"""Render a Hugging Face chat template one message at a time.

The engine never re-renders a conversation: each appended message is rendered once,
as the difference between the template applied to (anchor, message) and to (anchor)
alone, where the anchor is a fixed system message. For templates that render each
message independently (ChatML, Llama 3) this yields exactly the text, and so the
tokens, that rendering the whole history would give; the test suite checks it
token for token. The first message is rendered on its own, so a template's default
system prompt (SmolLM2 injects one) appears exactly as in a full rendering.

Messages with images (vision-language families, `vision` set): the template renders one
placeholder token per image (`<|image_pad|>`, `<|image|>`), which is then repeated to
the image's token count, as the family's HF processor does, and each image becomes a
`MultimodalItem` over its placeholders.
"""

from models.base import ChatProcessor, Segment
from tools.errors import DossierError

__all__ = ["IMAGE_MARK", "TemplateChatProcessor", "message_parts"]

IMAGE_MARK = "<image>"  # where an image goes in a string message given with `images=[...]`

_ANCHOR = {"role": "system", "content": "anchor"}
_MARK = "\u2063CONTENT\u2063"  # cannot occur in a template's own text


class TemplateChatProcessor(ChatProcessor):
    """Per-segment rendering for any tokenizer whose chat template renders messages independently."""

    def __init__(self, tokenizer, extra_stop_tokens: tuple[str, ...] = (), vision=None,
                 image_text: tuple[str, str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.vision = vision  # models.vision.VisionProcessor of a vision-language family, None for text-only
        self.image_text = image_text  # (what the template renders per image, the text the HF processor makes of it)
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

    def render_message(self, role: str, content, *, first: bool, images=None) -> Segment:
        content, pictures = message_parts(content, images)
        if pictures and self.vision is None:
            raise DossierError(f"this model is text-only; it cannot take images (got {len(pictures)} in a {role} message)")
        message = {"role": role, "content": content}
        text = self._render([message]) if first else self._after_anchor([message])
        if pictures and self.image_text is not None:
            text = text.replace(*self.image_text)
        token_ids = self.encode(text)
        return self._expand_images(token_ids, pictures) if pictures else Segment(token_ids)

    def image_tokens(self, image) -> int:
        """Tokens an image adds to a message (placeholders and start/end markers); see VisionProcessor."""
        if self.vision is None:
            raise DossierError("this model is text-only; it cannot take images")
        return self.vision.image_tokens(image)

    def _expand_images(self, token_ids: list[int], images: list) -> Segment:
        """Repeat each image's single placeholder token to its token count; one MultimodalItem per image."""
        pad = self.vision.image_token_id
        slots = [i for i, token in enumerate(token_ids) if token == pad]
        if len(slots) != len(images):
            raise DossierError(
                f"the chat template rendered {len(slots)} image placeholders for {len(images)} images; "
                "does the message text contain the placeholder token itself?"
            )
        out: list[int] = []
        items = []
        previous = 0
        for slot, image in zip(slots, images):
            out.extend(token_ids[previous:slot])
            item = self.vision.item(image, offset=len(out))
            out.extend([pad] * item.length)
            items.append(item)
            previous = slot + 1
        out.extend(token_ids[previous:])
        return Segment(out, mm_items=items)

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


def message_parts(content, images=None) -> tuple[str | list[dict], list]:
    """Normalise a message's content to what chat templates take, and list its images in order.

    Accepts a string; a string with `images` (placed at each `<image>` mark, or all before the
    text when it has none); or a list of parts: strings, PIL images, `{"type": "text", "text": ...}`
    and `{"type": "image", "image": PIL.Image}`.
    Returns:
        (a string when there are no images, else a list of text/image parts; the images in order)
    """
    if isinstance(content, str):
        if not images:
            return content, []
        images = [{"type": "image", "image": image} for image in images]
        pieces = content.split(IMAGE_MARK)
        if len(pieces) == 1:
            parts: list = [*images, content] if content else list(images)
        elif len(pieces) - 1 == len(images):
            parts = [pieces[0]]
            for image, text in zip(images, pieces[1:]):
                parts += [image, text]
        else:
            raise DossierError(f"the message has {len(pieces) - 1} {IMAGE_MARK} marks but {len(images)} images were given")
        return message_parts(parts)
    if not isinstance(content, list | tuple):
        raise DossierError(f"message content must be a string or a list of parts (got {type(content).__name__})")
    if images:
        raise DossierError("give images either inside the content parts or as images=[...], not both")
    parts, pictures = [], []
    for part in content:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        elif not isinstance(part, dict):
            part = {"type": "image", "image": part}
        kind = part.get("type")
        if kind == "text":
            if part.get("text"):
                parts.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            if not hasattr(part.get("image"), "size"):
                got = type(part.get("image")).__name__
                raise DossierError(f'an image part needs a PIL.Image under "image" (got {got})')
            parts.append({"type": "image"})
            pictures.append(part["image"])
        else:
            raise DossierError(f"message part type {kind!r} is not 'text' or 'image'")
    if not pictures:
        return "".join(p["text"] for p in parts), []
    return parts, pictures
