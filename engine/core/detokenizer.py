"""Incremental detokenisation: the text each new generated token adds, decoding only the last few tokens.

Decoding the whole reply after every token costs O(reply) per token (4.5 ms a token at 8,000
tokens), paid on the server's event loop when streaming and in the engine thread for stop strings.
`IncrementalDetokenizer` keeps two offsets into the tokens, as Hugging Face's and vLLM's incremental
detokenizers do: it decodes `tokens[prefix_offset:]`, and the text past that of
`tokens[prefix_offset:read_offset]` is new. The context tokens before `read_offset` let the decoder
join pieces as a whole-reply decode would (a byte-level token that continues a multi-byte
character, a SentencePiece decoder that strips the first leading space of what it decodes), and
a window whose text ends in U+FFFD (a character split across tokens) waits for the next token.

The pieces joined are exactly the whole reply decoded at once for decoders that only look back
at their own input: byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2) and SentencePiece with byte
fallback (Gemma, Llama 2). transformers 5 no longer applies `clean_up_tokenization_spaces` to BPE
tokenizers, the one rewrite that let a later token change earlier text. tests/engine/test_detokenizer.py
checks the equality on random token streams of both kinds.

`StopScan` finds the first stop string in a growing text looking only at the new piece plus the
longest stop string's length minus one characters before it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["IncrementalDetokenizer", "StopScan", "StopStrings"]


class IncrementalDetokenizer:
    """The text a growing token list adds, one call per step.

    Args:
        decode: token ids to text (special tokens skipped), e.g. `ChatProcessor.decode`.
    """

    __slots__ = ("decode", "tokens", "prefix_offset", "read_offset")

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.tokens: list[int] = []
        self.prefix_offset = 0  # first token of the decoding window: context for the new ones
        self.read_offset = 0  # the text of tokens before this one has been returned

    def add(self, token_ids: list[int]) -> str:
        """Take the next generated tokens; return the text they complete ('' while a character is split)."""
        if not token_ids:
            return ""
        self.tokens += token_ids
        start, read = self.prefix_offset, self.read_offset
        before = self.decode(self.tokens[start:read]) if read > start else ""
        text = self.decode(self.tokens[start:])
        if text.endswith("\ufffd"):  # a character split across tokens: wait for its other bytes
            return ""
        piece = text[len(before):]
        # The new tokens become the next window's context only once they produced text: a window
        # whose context decodes to nothing (special tokens) would let a SentencePiece decoder strip
        # the leading space of the token after it, which a whole-reply decode keeps.
        if piece:
            self.prefix_offset = read
        self.read_offset = len(self.tokens)
        return piece


class StopScan:
    """The first stop string in a text that arrives in pieces, searching each piece once.

    Args:
        stop: the stop strings (non-empty).
    """

    __slots__ = ("stop", "keep", "tail", "seen")

    def __init__(self, stop: list[str]) -> None:
        self.stop = list(stop)
        # A stop string ending in the next piece starts at most this many characters before it.
        self.keep = max((len(s) for s in self.stop), default=1) - 1
        self.tail = ""  # the last `keep` characters seen
        self.seen = 0  # characters seen so far

    def feed(self, piece: str) -> int | None:
        """Take the next piece; return where (in the whole text) the first stop string starts, None if none yet."""
        if not piece:
            return None
        window = self.tail + piece
        found = [i for i in (window.find(s) for s in self.stop) if i >= 0]
        origin = self.seen - len(self.tail)  # index of window[0] in the whole text
        self.seen += len(piece)
        self.tail = window[-self.keep:] if self.keep else ""
        return origin + min(found) if found else None


class StopStrings:
    """Whether a stop string has appeared in a reply, decoding and searching only its new text per token.

    Args:
        decode: token ids to text (special tokens skipped).
        stop: the request's stop strings.
    """

    __slots__ = ("text", "scan")

    def __init__(self, decode: Callable[[list[int]], str], stop: list[str]) -> None:
        self.text = IncrementalDetokenizer(decode)
        self.scan = StopScan(stop)

    def add(self, token_ids: list[int]) -> bool:
        """Take the next generated tokens; True once the reply's text holds a stop string."""
        return self.scan.feed(self.text.add(token_ids)) is not None
