"""Per-token detokenisation cost of a long streamed reply: whole-reply decode (before issue 45) vs incremental.

Two places decode every generated token: the server's stream (`TextDeltas.add`, on the event
loop) and the engine's stop-string check (`Engine._accept`, in the engine thread). Before, both
decoded the whole reply again for every token; now they decode a window of a few tokens
(engine/core/detokenizer.py). This feeds one reply of `--tokens` tokens (the default model's
tokenizer over a report-like text with some non-ASCII) through both ways, in one process, and
prints the mean cost of one token over the last `--tail` tokens, where the reply is longest.

Usage:
    .venv/bin/python benchmarks/bench_detokenize.py [--model default] [--tokens 8000] [--tail 500]
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.detokenizer import StopStrings  # noqa: E402
from engine.serve.generate import TextDeltas  # noqa: E402

PARAGRAPH = ("Net revenue for fiscal 2023 was $48,250 thousand, up 12 % from €41.2 million; operating margin "
             "reached 18.4 % — the highest since 2019. Tokyo (東京) and München contributed 9 % each. ")
STOP = ["<|im_end|>", "\n\nQuestion:"]  # never in the text: the check runs on every token


class WholeReplyDeltas:
    """TextDeltas.add as it was: the whole reply decoded after every token (the peer)."""

    def __init__(self, processor, stop):
        self.processor, self.stop = processor, stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.tokens, self.text, self.sent = [], "", 0

    def add(self, token_ids):
        self.tokens += token_ids
        text = self.processor.decode(self.tokens)
        if text.endswith("\ufffd"):
            return ""
        cut = min((i for i in (text.find(s) for s in self.stop) if i >= 0), default=len(text))
        self.text = text = text[:cut]
        upto = max(self.sent, len(text) - (self.hold if cut == len(text) else 0))
        piece, self.sent = text[self.sent:upto], upto
        return piece


class WholeReplyStops:
    """Engine._accept's stop-string check as it was: decode the whole reply, search all of it."""

    def __init__(self, processor, stop):
        self.processor, self.stop, self.tokens = processor, stop, []

    def add(self, token_ids):
        self.tokens += token_ids
        text = self.processor.decode(self.tokens)
        return any(s in text for s in self.stop)


def per_token_ms(make, tokens: list[int], tail: int) -> float:
    """Mean milliseconds of one `add` over the last `tail` tokens of the reply."""
    watcher = make()
    for token in tokens[:-tail]:
        watcher.add([token])
    started = time.perf_counter()
    for token in tokens[-tail:]:
        watcher.add([token])
    return (time.perf_counter() - started) / tail * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="whose tokenizer (a model folder, a .gguf, 'default')")
    parser.add_argument("--tokens", type=int, default=8000, help="length of the reply, tokens")
    parser.add_argument("--tail", type=int, default=500, help="tokens timed at the end of the reply")
    args = parser.parse_args()
    from models.loading import load_processor

    processor = load_processor(args.model)
    tokens: list[int] = []
    while len(tokens) < args.tokens:
        tokens += processor.encode(PARAGRAPH)
    tokens = tokens[:args.tokens]
    per_token_ms(lambda: TextDeltas(processor, STOP), tokens[:600], 100)  # warm up the tokenizer
    result = {"tokens": args.tokens, "tail": args.tail}
    for name, old, new in [("stream", WholeReplyDeltas, TextDeltas), ("stop_strings", WholeReplyStops, StopStrings)]:
        before = per_token_ms(lambda: old(processor, STOP), tokens, args.tail)
        after = per_token_ms(lambda: new(processor, STOP) if new is TextDeltas else new(processor.decode, STOP),
                             tokens, args.tail)
        result[name] = {"whole_reply_ms_per_token": round(before, 4), "incremental_ms_per_token": round(after, 4),
                        "ratio": round(before / after, 1)}
    streamed = TextDeltas(processor, [])
    text = "".join(streamed.add([t]) for t in tokens) + streamed.finish(processor.decode(tokens))
    result["same_text"] = text == processor.decode(tokens)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
