"""Issue 45, finding 9: a streamed reply and its stop strings decode only the new tokens, with the same text.

Every streamed token used to re-decode the whole reply, on the server's event loop
(`TextDeltas.add`) and in the engine thread for stop strings (`Engine._accept`): 4.5 ms a
token at 8,000 tokens. These tests count how many tokens each decode call is given (it must not
grow with the reply) and check the text against decoding the whole reply at once, with multi-byte
characters split across tokens, special tokens, and stop strings spanning token boundaries, for a
byte-level BPE and a SentencePiece-style (byte fallback, stripped first space) tokenizer.
"""

import random

import pytest

from engine import Engine, EngineConfig, FinishReason, SamplingParams
from tests.engine.conftest import random_prompt

# Decoding a window of this many tokens per step is "only the new ones": the new token and the
# few before it that a split multi-byte character or a stripped space need.
WINDOW = 8
TEXT = ("Revenue rose 12 % to €1.577 bn — 漢字 and ümlauts, 🙂 emoji 🚀, café, naïve; " * 12).strip()


class CountingDecode:
    """Wraps a processor; records how many tokens each decode call is given."""

    def __init__(self, processor):
        self.processor = processor
        self.sizes: list[int] = []

    def decode(self, token_ids):
        self.sizes.append(len(token_ids))
        return self.processor.decode(token_ids)

    def __getattr__(self, name):
        return getattr(self.processor, name)


class Processor:
    """A decode-only processor around an HF tokenizer (special tokens skipped, as the engine's)."""

    def __init__(self, tokenizer, kind: str):
        self.tokenizer, self.kind = tokenizer, kind

    def decode(self, token_ids):
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)


def sentencepiece_tokenizer():
    """A Llama-2-style tokenizer: '▁' for spaces, <0xNN> byte fallback, the first leading space stripped."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    for piece in ["▁", "▁Revenue", "▁rose", "▁to", "▁€", "1", ".", "5", "7", "▁bn", "▁—", "▁漢", "字", "ü", "m",
                  "l", "a", "u", "t", "s", ",", "▁caf", "é", "▁na", "ï", "ve", ";", "▁", "▁▁", "%"]:
        vocab.setdefault(piece, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module", params=["byte-level", "sentencepiece"])
def processor(request):
    from tests.engine.conftest import build_tokenizer

    tokenizer = build_tokenizer() if request.param == "byte-level" else sentencepiece_tokenizer()
    return Processor(tokenizer, request.param)


PALETTE = "abc xyz,.;€—漢字üïé🙂🚀\n  "


def streams(processor, count: int, length: int, seed: int = 0, any_ids: bool = False):
    """Token lists of valid text: the test text, then random texts from PALETTE (characters of 1-4 UTF-8 bytes,
    runs of spaces) encoded, with special tokens dropped in; with `any_ids`, random ids instead (invalid bytes)."""
    tokenizer = processor.tokenizer
    yield tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    rng = random.Random(seed)
    specials = sorted(tokenizer.all_special_ids)
    for _ in range(count):
        if any_ids:
            yield [rng.randrange(len(tokenizer)) for _ in range(length)]
            continue
        text = "".join(rng.choice(PALETTE) for _ in range(length))
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        for _ in range(rng.randrange(3)):
            tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(specials))
        yield tokens


def chunked(tokens: list[int], seed: int) -> list[list[int]]:
    """The tokens as the server hands them over: mostly one per step, sometimes several."""
    rng, out, i = random.Random(seed), [], 0
    while i < len(tokens):
        n = rng.choice([1, 1, 1, 2, 3])
        out.append(tokens[i:i + n])
        i += n
    return out


def test_finding9_a_streamed_reply_decodes_only_its_new_tokens(processor):
    from engine.serve.generate import TextDeltas

    tokens = next(streams(processor, 0, 0))
    assert len(tokens) > 400, "the reply must be long enough for a whole-reply decode to show"
    counting = CountingDecode(processor)
    deltas = TextDeltas(counting, [])
    shown = "".join(deltas.add([t]) for t in tokens)
    whole = processor.decode(tokens)
    shown += deltas.finish(whole)
    assert shown == whole
    assert max(counting.sizes) <= WINDOW, (
        f"a step decoded {max(counting.sizes)} tokens of a {len(tokens)}-token reply: the whole reply again")
    assert sum(counting.sizes) <= 2 * WINDOW * len(tokens)


def test_finding9_stop_strings_decode_only_the_new_tokens(tiny_llama):
    engine = Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, num_kv_blocks=256))
    counting = CountingDecode(engine.processor)
    engine.processor = counting
    session = engine.open_session()
    session.append(random_prompt(12, seed=7))
    steps = 300
    request = session.generate(SamplingParams(max_new_tokens=steps, ignore_eos=True, stop=["\x00never\x00"]))
    assert len(request.output_token_ids) == steps
    *per_token, final = counting.sizes  # the finished reply is decoded once, whole, for its text
    assert final == steps
    assert max(per_token) <= WINDOW, (
        f"a step decoded {max(per_token)} tokens of a {steps}-token reply to look for a stop string")
    assert request.text == engine.processor.processor.decode(request.output_token_ids)


STOPS = [[], ["e"], ["an", "字 "], ["\ufffd"], [", 🙂", "ve; Rev"], ["ü 漢", "\n\n"]]


@pytest.mark.parametrize("stops", STOPS)
def test_streamed_text_equals_the_whole_reply_decoded_at_once(processor, stops):
    """At every step the text shown is a prefix of the final text; at the end it is the final text.

    Random ids (invalid UTF-8 runs) only for the byte-level tokenizer: a byte-fallback decoder turns
    every byte of a run that holds an invalid sequence into U+FFFD, so a character it showed can
    become U+FFFD when a later byte arrives. No streaming can take that back (decoding the whole
    reply every step did not either); the finished text, decoded whole, is right.
    """
    from engine.serve.generate import TextDeltas

    kinds = [False, True] if processor.kind == "byte-level" else [False]
    for any_ids in kinds:
        for number, tokens in enumerate(streams(processor, 30, 40, seed=len(stops), any_ids=any_ids)):
            whole = processor.decode(tokens)
            cut = min((i for i in (whole.find(s) for s in stops) if i >= 0), default=len(whole))
            final = whole[:cut]
            deltas = TextDeltas(processor, stops)
            shown = ""
            for chunk in chunked(tokens, number):
                shown += deltas.add(chunk)
                assert final.startswith(shown), (tokens, shown, final)
            assert shown + deltas.finish(final) == final


def test_the_incremental_detokenizer_joins_to_the_whole_decode(processor):
    from engine.core.detokenizer import IncrementalDetokenizer

    for tokens in streams(processor, count=60, length=50, seed=3):
        decoder = IncrementalDetokenizer(processor.decode)
        pieces = [decoder.add([t]) for t in tokens]
        assert "".join(pieces) == processor.decode(tokens), tokens


def test_a_stop_string_spanning_tokens_ends_the_reply_where_the_whole_decode_finds_it(tiny_llama):
    engine = Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, num_kv_blocks=256))
    prompt = random_prompt(10, seed=11)
    with engine.open_session() as session:
        session.append(prompt)
        free = session.generate(SamplingParams(max_new_tokens=80, ignore_eos=True))
    tokens = free.output_token_ids
    decode = engine.processor.decode
    # a token boundary in clean text, and a stop string of two characters each side of it
    ends = [len(decode(tokens[:k])) for k in range(1, len(tokens) + 1)]
    text = decode(tokens)
    boundary = next(b for k, b in enumerate(ends[20:], 20)
                    if 2 <= b <= len(text) - 2 and "\ufffd" not in text[b - 2:b + 2] and ends[k - 1] <= b - 2)
    stop = text[boundary - 2:boundary + 2]
    expected_tokens = next(k for k in range(1, len(tokens) + 1) if stop in decode(tokens[:k]))
    with engine.open_session() as session:
        session.append(prompt)
        stopped = session.generate(SamplingParams(max_new_tokens=80, ignore_eos=True, stop=[stop]))
    assert stopped.finish_reason is FinishReason.stop_string
    assert len(stopped.output_token_ids) == expected_tokens
    assert stopped.text == text[:text.find(stop)]
