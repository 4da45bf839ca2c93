"""A session: one conversation (agent episode) whose KV cache lives across turns.

Append segments (a chat message rendered once with the model's template, a generation
prompt, or raw token ids), generate, run a tool, append its result, generate again:
each turn computes only the newly appended tokens. Between turns the session stays
pinned (its KV blocks are kept) until it is closed or memory runs short, when the
least recently used sessions are preempted and recompute later.

    with engine.open_session() as session:
        session.append_message("system", SYSTEM_PROMPT)
        session.append_message("user", question)
        session.append_generation_prompt()
        reply = session.generate(SamplingParams(max_new_tokens=64))
        session.append_message("tool", run_tool(reply.text))

Vision-language models take images in a message: `append_message("user", "File: a, Page: 3",
images=[page_image])`, or content parts (`models.vision.page_image_content`). Each image
costs `engine.processor.image_tokens(image)` tokens, known before it is appended.
"""

import hashlib
from array import array

from engine.core.counters import Counters
from engine.core.request import Request
from engine.core.sampling_params import SamplingParams
from engine.core.sequence import Sequence
from models.base import MultimodalItem, Segment
from tools.errors import DossierError

__all__ = ["Session"]


class Session:
    """One conversation's tokens, KV cache and counters; create with `Engine.open_session()`."""

    def __init__(self, engine, session_id: int, seq: Sequence) -> None:
        self.engine = engine
        self.session_id = session_id
        self.seq = seq
        self.counters = Counters()
        self.history_len = 0  # tokens held when the previous turn finished
        self.request: Request | None = None  # the turn being generated, if any
        self.closed = False
        self._turn_start: int | None = None  # token index where an open assistant turn's generation began

    # --- appending ---------------------------------------------------------------

    def append(self, token_ids: list[int]) -> None:
        """Append raw token ids (no template)."""
        self.append_segment(Segment(list(token_ids)))

    def append_segment(self, segment: Segment) -> None:
        """Append a segment (token ids, optional positions and multimodal items)."""
        self.engine._append(self, segment)

    def append_message(self, role: str, content, images=None) -> list[int]:
        """Render one chat message with the model's template and append it; return its token ids.

        An assistant turn left open by `generate` is closed first (e.g. "<|im_end|>\\n"),
        exactly as the template would render the generated text.

        Args:
            role: "system", "user", "assistant", "tool".
            content: the text; or a list of parts (strings, PIL images, {"type": "text", "text": ...},
                {"type": "image", "image": PIL.Image}) for vision-language models.
            images: PIL images for a string `content`, placed at its `<image>` marks, or before the
                text when it has none (vision-language models).
        """
        processor = self._processor()
        ended_by = self._close_turn()
        segment = processor.render_message(role, content, first=len(self.seq) == 0, images=images)
        if ended_by is not None and segment.token_ids[:1] == [ended_by]:
            segment = _drop_first_token(segment)  # GLM: the model already emitted the next role token
        self.append_segment(segment)
        return segment.token_ids

    def append_generation_prompt(self) -> list[int]:
        """Open an assistant turn (e.g. "<|im_start|>assistant\\n"); return its token ids."""
        processor = self._processor()
        self._close_turn()
        segment = processor.generation_prompt()
        self.append_segment(segment)
        self._turn_start = len(self.seq)
        return segment.token_ids

    def _close_turn(self) -> int | None:
        """Close an open assistant turn. Returns the stop token that ended it when the template adds
        nothing after a turn (GLM: the next role token is the stop), else None."""
        if self.request is not None:
            raise DossierError(f"session {self.session_id} is generating; wait for its request before appending")
        if self._turn_start is None:
            return None
        processor = self._processor()
        generated = self.seq.token_ids[self._turn_start :]
        closing = processor.close_turn(generated)
        self.append_segment(closing)
        self._turn_start = None
        if not closing.token_ids and generated and generated[-1] in processor.stop_token_ids:
            return generated[-1]
        return None

    def _processor(self):
        if self.engine.processor is None:
            raise DossierError(f"model {self.engine.adapter.name!r} has no tokenizer; append token ids with session.append()")
        return self.engine.processor

    def fork(self) -> "Session":
        """A new session holding this conversation so far, to continue it another way.

        The child's tokens, positions and images are this session's; its KV comes from the
        prefix cache (every full block this session has computed is shared, not copied), so a
        fork costs the partial last block. An assistant turn left open stays open in the child.
        """
        if self.request is not None:
            raise DossierError(f"session {self.session_id} is generating; fork it between turns")
        child = self.engine.open_session(self.seq.cache_salt)  # the same namespace: its blocks are shared
        seq = self.seq
        if len(seq):
            items = [MultimodalItem(start, item.length, item.content_hash, item.data) for start, item in seq.mm_items]
            child.append_segment(Segment(list(seq.token_ids), list(seq.positions), items))
        child.seq.next_position = seq.next_position
        child.history_len = self.history_len
        child._turn_start = self._turn_start
        return child

    def append_finished_turn(self, token_ids: list[int]) -> None:
        """Append a turn's generated ids, recorded earlier, as if this session had just generated them (a resumed
        run replays a turn this way); the session is left as a finished turn leaves it."""
        self.append(token_ids)
        self.history_len = len(self.seq)

    # --- generating --------------------------------------------------------------

    def submit(self, sampling: SamplingParams | None = None) -> Request:
        """Queue a generation turn; drive it with `engine.step()` (see `Engine.submit`)."""
        return self.engine.submit(self, sampling)

    def generate(self, sampling: SamplingParams | None = None) -> Request:
        """Generate one turn, stepping the engine until it finishes (other sessions progress too).

        Returns:
            the finished `Request`: `.output_token_ids`, `.text`, `.finish_reason`, `.counters`.
        """
        request = self.submit(sampling)
        while not request.finished:
            self.engine.step()
        return request.wait()

    # --- state -------------------------------------------------------------------

    @property
    def token_ids(self) -> list[int]:
        """The whole conversation so far, as token ids."""
        return list(self.seq.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.seq)

    @property
    def cache_salt(self) -> str | None:
        """The prefix-cache namespace of this session's blocks (None: the shared one)."""
        return self.seq.cache_salt

    def image_hashes(self) -> list[tuple[int, str]]:
        """(token index, content hash) of each image in the conversation."""
        return [(start, item.content_hash) for start, item in self.seq.mm_items]

    def fingerprint(self) -> str:
        """A digest of the conversation's tokens and of its images' contents (an image's placeholder tokens do not
        change with its pixels): equal fingerprints, equal conversations."""
        digest = hashlib.blake2b(array("q", self.seq.token_ids).tobytes(), digest_size=12)
        for start, content_hash in self.image_hashes():
            digest.update(f"{start}:{content_hash}".encode())
        return digest.hexdigest()

    def is_prefix_of(self, token_ids: list[int], image_hashes: list[tuple[int, str]], cache_salt: str | None) -> bool:
        """Is this conversation the start of one with these tokens, images ((index, hash), in order) and salt?"""
        held = len(self.seq)
        if self.seq.cache_salt != cache_salt or token_ids[:held] != self.seq.token_ids:
            return False
        return self.image_hashes() == [(start, h) for start, h in image_hashes if start < held]

    @property
    def num_cached_tokens(self) -> int:
        """Tokens whose KV is in the cache right now (0 after a preemption)."""
        return self.seq.num_computed_tokens

    def close(self) -> None:
        """Free the session's KV blocks (shared prefixes stay cached) and cancel a running turn."""
        self.engine._close(self)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(id={self.session_id}, tokens={len(self.seq)}, cached={self.seq.num_computed_tokens})"


def _drop_first_token(segment: Segment) -> Segment:
    items = [MultimodalItem(i.offset - 1, i.length, i.content_hash, i.data) for i in segment.mm_items]
    assert all(i.offset >= 0 for i in items), "a segment cannot start with an image placeholder"
    return Segment(segment.token_ids[1:], None if segment.positions is None else segment.positions[1:], items)
