"""OpenAI messages to the token segments the engine appends, rendered one message at a time.

Each message is rendered alone with the model's chat template (`ChatProcessor.render_message`),
so the tokens of a conversation's first N messages are the same whichever request carries
them: a harness that re-sends the whole history each turn finds it in the prefix cache.
An assistant message the server generated itself is replaced by the exact tokens it
generated (`ReplyMemory`), as the in-process runner keeps them; re-tokenising the text
could split it differently and miss the cache from that point on.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.serve.images import finish_image, open_image_url
from engine.serve.protocol import ApiError, ChatMessage
from engine.serve.tool_calls import render_tool_calls
from models.base import MultimodalItem, Segment
from tools.errors import DossierError

__all__ = ["Prompt", "ReplyMemory", "ImageLimits", "render_chat", "reply_key"]


@dataclass(slots=True)
class Prompt:
    """A request's tokens as the segments appended to a session (images inside their segments)."""

    segments: list[Segment] = field(default_factory=list)
    cache_salt: str | None = None  # the client's prefix-cache namespace (engine/serve/clients.py); None: shared

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    def image_hashes(self) -> list[tuple[int, str]]:
        """(absolute first token, content hash) of every image."""
        out, start = [], 0
        for segment in self.segments:
            out += [(start + item.offset, item.content_hash) for item in segment.mm_items]
            start += len(segment.token_ids)
        return out

    def suffix_from(self, start: int) -> list[Segment] | None:
        """The segments holding tokens [start:], splitting one text run if needed; None if an image straddles `start`."""
        out, offset = [], 0
        for segment in self.segments:
            end = offset + len(segment.token_ids)
            if end <= start:
                offset = end
                continue
            if offset >= start:
                out.append(segment)
            else:
                cut = start - offset
                if any(item.offset < cut < item.offset + item.length for item in segment.mm_items):
                    return None
                items = [MultimodalItem(i.offset - cut, i.length, i.content_hash, i.data)
                         for i in segment.mm_items if i.offset >= cut]
                positions = None if segment.positions is None else segment.positions[cut:]
                out.append(Segment(segment.token_ids[cut:], positions, items))
            offset = end
        return out


def reply_key(content: str | None, tool_calls: list[dict] | None) -> str:
    """Key of an assistant message as a client sends it back: its text and its calls (ids ignored)."""
    calls = []
    for call in tool_calls or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        try:
            arguments = json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))
        except (TypeError, json.JSONDecodeError):
            arguments = str(arguments)
        calls.append([function.get("name", ""), arguments])
    text = json.dumps([(content or "").strip(), calls], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ReplyMemory:
    """The tokens of replies the server generated, keyed by the message a client will send back (LRU)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[tuple[int, ...], tuple[int, ...]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def remember(self, key: str, generated: list[int], closing: list[int]) -> None:
        """Store a reply: the tokens from the generation prompt to the last generated one, and the turn's closing."""
        with self._lock:
            self._entries[key] = (tuple(generated), tuple(closing))
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def recall(self, key: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return entry


@dataclass(slots=True, frozen=True)
class ImageLimits:
    max_bytes: int  # largest decoded image
    max_pixels: int  # largest width x height
    max_count: int  # most images per request
    max_total_pixels: int | None = None  # most width x height of all a request's images together (None: no sum limit)


def render_chat(processor, messages: list[ChatMessage], tools_block: str | None, memory: ReplyMemory | None,
                limits: ImageLimits) -> Prompt:
    """Render a chat request's messages and the assistant generation prompt into segments.

    Args:
        processor: the engine's `ChatProcessor`.
        messages: the request's messages, oldest first.
        tools_block: text describing the tools, appended to the first system message (one is
            added at the front when the conversation has none).
        memory: replies generated earlier, to reuse their exact tokens.
        limits: bounds on the request's images.
    Raises:
        ApiError(400) naming the message for content the template or the model cannot take.
    """
    messages = list(messages)
    if tools_block:
        if messages[0].role in ("system", "developer"):
            head = messages[0]
            messages[0] = ChatMessage(role="system", content=_text_of(head, 0) + tools_block)
        else:
            messages.insert(0, ChatMessage(role="system", content=tools_block.lstrip("\n")))
    images = _request_images(processor, messages, limits)
    prompt = Prompt()
    generation = processor.generation_prompt().token_ids
    for index, message in enumerate(messages):
        role = "system" if message.role == "developer" else message.role
        where = f"messages[{index}]"
        try:
            if role == "assistant":
                key = reply_key(_text_of(message, index) or None, message.tool_calls)
                remembered = memory.recall(key) if memory is not None else None
                if remembered is not None and prompt.segments:  # generation prompt + generated, then the closing
                    prompt.segments += [Segment(list(remembered[0])), Segment(list(remembered[1]))]
                    continue
                text = _text_of(message, index)
                if message.tool_calls:
                    text = (text + "\n" if text else "") + render_tool_calls(message.tool_calls)
                prompt.segments.append(processor.render_message("assistant", text, first=index == 0))
            elif role == "tool":
                prompt.segments.append(processor.render_message("tool", _text_of(message, index), first=index == 0))
            else:
                parts = _parts(message, index, images)
                prompt.segments.append(processor.render_message(role, parts, first=index == 0))
        except DossierError as err:
            raise ApiError(400, f"{where} ({message.role}): {err}", where) from None
    prompt.segments.append(Segment(list(generation)))
    return prompt


def _text_of(message: ChatMessage, index: int) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(400, f"messages[{index}].content[{j}]: a {message.role} message may only hold text parts "
                                f"(got type {part.get('type')!r})", f"messages[{index}].content")
        texts.append(part["text"])
    return "".join(texts)


def _request_images(processor, messages: list[ChatMessage], limits: ImageLimits) -> dict[tuple[int, int], object]:
    """Every image of the request, decoded, by (message, part) index, after the cheap checks passed for all of them.

    In order, so that a few kilobytes cannot make the server decode gigabytes: a text-only
    model refuses any image (400); then the count (413); then each image's declared size,
    alone and summed over the request, from its header (413 naming the image); only then
    are they decoded.
    """
    found = [(i, j, part) for i, message in enumerate(messages) if message.role not in ("assistant", "tool")
             and isinstance(message.content, list)
             for j, part in enumerate(message.content) if part.get("type") == "image_url"]
    if not found:
        return {}
    if getattr(processor, "vision", False) is None:  # a template processor without a vision tower
        index = found[0][0]
        raise ApiError(400, f"messages[{index}] ({messages[index].role}): this model is text-only; it cannot take "
                            f"images (the request has {len(found)})", f"messages[{index}]")
    if len(found) > limits.max_count:
        index = found[limits.max_count][0]
        raise ApiError(413, f"the request has more than {limits.max_count} images; send fewer", f"messages[{index}]")
    opened, total = {}, 0
    for i, j, part in found:
        where = f"messages[{i}].content[{j}]"
        image_url = part.get("image_url")
        url = image_url.get("url") if isinstance(image_url, dict) else image_url
        image = open_image_url(url, where, limits.max_bytes, limits.max_pixels)
        total += image.size[0] * image.size[1]
        if limits.max_total_pixels is not None and total > limits.max_total_pixels:
            raise ApiError(413, f"{where}: the request's images come to {total} pixels with this one, over the limit "
                                f"of {limits.max_total_pixels} per request; send fewer or smaller images", where)
        opened[(i, j)] = image
    return {key: finish_image(image, f"messages[{key[0]}].content[{key[1]}]") for key, image in opened.items()}


def _parts(message: ChatMessage, index: int, images: dict[tuple[int, int], object]) -> str | list:
    """A user/system message's content as `render_message` takes it (strings and the request's decoded images)."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}: a text part needs a string 'text'", where)
            parts.append(part["text"])
        elif kind == "image_url":
            parts.append(images[(index, j)])
        else:
            raise ApiError(400, f"{where}: content part type {kind!r} is not supported (use 'text' or 'image_url')",
                           where)
    return parts
