"""Structured output with xgrammar: JSON schema, regex or EBNF enforced token by token.

Grammars are compiled once per (kind, text) and cached; each request gets its own
`GrammarMatcher`. Before sampling, the matcher's bitmask removes every token that
would break the grammar; after sampling, the token is fed to the matcher. When the
grammar is complete only the model's end-of-turn tokens stay allowed, so a tool call
always ends as a well-formed turn.

One client's grammar must never stall another's request (issue 45: a 40,000-value enum
compiled for minutes under one global lock while every other request waited):

  - `check_schema_limits` refuses, before anything compiles, a schema bigger than its limits
    (bytes, enum values, properties; `SchemaLimits`), naming the limit;
  - compilation runs in a small executor of its own, never on a request thread or under the
    engine's lock: one future per (kind, text), so equal grammars compile once and different
    ones never wait on each other's lock; past `max_pending` distinct grammars compiling or
    queued, a new one is refused at once (`GrammarBusy`); a caller waits at most
    `compile_timeout_s` (`GrammarTimeout`), and the compile finishes in the background
    (xgrammar cannot be cancelled), so a retry finds it ready;
  - new grammars are admitted at a bounded rate (`new_per_s`, in bursts of `new_burst`; a token
    bucket): a schema seen before comes from the cache at no cost, but a client sending a stream
    of distinct schemas is refused (`GrammarBusy`, a 503 to retry) before its requests' compiles,
    cache churn and prefill crowd out everyone else's (40 distinct schemas in one burst admitted
    14 requests whose prefill doubled an honest request's time; benchmarks/hostile_serve.py);
  - compiled grammars live in an LRU bounded in bytes (xgrammar's own cache is off).

JSON schemas compile to compact JSON (no free whitespace). xgrammar 0.2's rule for
length-bounded strings admits raw control characters (U+0000-U+001F except CR, LF),
which JSON forbids and strict parsers reject; `json_schema_grammar` patches that rule
so every output parses with `json.loads`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools.errors import DossierError, missing_dependency

if TYPE_CHECKING:
    import torch

__all__ = ["GrammarBusy", "GrammarCache", "GrammarTimeout", "SchemaLimits", "check_schema_limits",
           "json_schema_grammar"]

_BOUNDED_STRING_CHAR = r'[^\"\\\r\n]'  # xgrammar's character class inside a string with minLength/maxLength
_JSON_STRING_CHAR = r'[^\0-\x1f\"\\]'  # what JSON allows unescaped


class GrammarBusy(DossierError):
    """Too many distinct grammars are compiling now; retry shortly (HTTP 503)."""

    status = 503


class GrammarTimeout(DossierError):
    """The grammar did not compile within the time limit; it goes on compiling in the background (HTTP 503)."""

    status = 503


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    """What one structured-output constraint may hold; each bounds xgrammar's compile time and memory."""

    max_bytes: int = 64 * 1024  # the schema, regex or grammar text, bytes (UTF-8 of its compact JSON)
    max_enum_values: int = 1024  # enum values plus consts over the whole schema
    max_properties: int = 1024  # object properties over the whole schema
    # JSON objects and arrays nested inside one another, levels: xgrammar's EBNF grows with the square of
    # the depth (a 24 KB schema nested 450 objects deep took 10 s to convert, on a request thread for tools)
    max_depth: int = 64

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_enum_values", "max_properties", "max_depth"):
            if getattr(self, name) < 1:
                raise DossierError(f"schema limit {name} must be at least 1 (got {getattr(self, name)})")


def check_schema_limits(schema, limits: SchemaLimits, what: str = "json_schema") -> None:
    """Refuse a schema (dict or JSON text) beyond `limits`, before anything compiles it.

    Raises:
        DossierError: naming the limit, the schema's value and the option that changes it.
    """
    text = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            schema = None  # a regex or grammar text: its size is what bounds it
    enums = properties = deepest = 0
    pending = [(schema, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
        if isinstance(node, dict):
            if isinstance(node.get("enum"), list):
                enums += len(node["enum"])
            if "const" in node:
                enums += 1
            if isinstance(node.get("properties"), dict):
                properties += len(node["properties"])
            pending.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            pending.extend((item, depth + 1) for item in node)
    if deepest > limits.max_depth:
        raise DossierError(f"{what} is nested {deepest:,} levels deep (JSON objects and arrays), over the limit of "
                           f"{limits.max_depth:,} (dossier serve --max-schema-depth)")
    if enums > limits.max_enum_values:
        raise DossierError(f"{what} has {enums:,} enum values, over the limit of {limits.max_enum_values:,} "
                           "(dossier serve --max-schema-enum-values)")
    if properties > limits.max_properties:
        raise DossierError(f"{what} has {properties:,} properties, over the limit of {limits.max_properties:,} "
                           "(dossier serve --max-schema-properties)")
    size = len(text.encode("utf-8"))
    if size > limits.max_bytes:
        raise DossierError(f"{what} is {size:,} bytes, over the limit of {limits.max_bytes:,} "
                           "(dossier serve --max-schema-bytes)")


def json_schema_grammar(schema: str | dict) -> str:
    """EBNF text (xgrammar) of compact JSON matching `schema`, its strings free of raw control characters.

    Raises:
        DossierError: the schema is not one xgrammar can compile (the message quotes it).
    """
    import xgrammar

    text = schema if isinstance(schema, str) else json.dumps(schema)
    try:
        grammar = xgrammar.Grammar.from_json_schema(text, any_whitespace=False)
    except Exception as err:  # xgrammar raises RuntimeError/ValueError with the reason
        shown = text if len(text) < 200 else text[:200] + "..."
        raise DossierError(f"invalid json_schema for structured output ({err}): {shown}") from None
    return str(grammar).replace(_BOUNDED_STRING_CHAR, _JSON_STRING_CHAR)


class GrammarCache:
    """Compiles grammars for one tokenizer, off the callers' threads, and hands out matchers.

    Args:
        tokenizer, vocab_size, stop_token_ids: the model's (xgrammar's TokenizerInfo is built from them).
        compile_timeout_s: longest a caller waits for one compile, seconds.
        cache_bytes: compiled grammars kept, bytes (least recently used dropped beyond it).
        workers: grammars compiled at once (each compile also uses one xgrammar thread).
        max_pending: distinct grammars compiling or queued at once; more are refused (`GrammarBusy`).
        new_per_s, new_burst: grammars not in the cache accepted per second, and at once after a quiet spell;
            more are refused (`GrammarBusy`). `new_per_s=0` turns the rate off.
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: set[int], compile_timeout_s: float = 30.0,
                 cache_bytes: int = 64 * 2**20, workers: int = 1, max_pending: int = 4, new_per_s: float = 2.0,
                 new_burst: int = 4, clock=time.monotonic) -> None:
        try:
            import xgrammar
        except ImportError:
            raise missing_dependency("xgrammar", "pip install xgrammar") from None
        self._xgr = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self.vocab_size = vocab_size
        self.compile_timeout_s = compile_timeout_s
        self.cache_bytes = cache_bytes
        self.max_pending = max_pending
        self.new_per_s, self.new_burst, self._clock = new_per_s, new_burst, clock
        self._allowance, self._refilled = float(new_burst), clock()  # the token bucket of new grammars
        # xgrammar's own cache never evicts by default: ours is the only one
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dossier-grammar")
        self._compiled: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}  # bytes each kept grammar holds
        self._bytes = 0
        self._pending: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()  # guards the two tables above; never held while compiling
        self.counters = {"compiled": 0, "evicted": 0, "busy": 0, "timeouts": 0}

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def compile(self, kind: str, text: str) -> Future:
        """A future of the compiled grammar: done at once when cached, else shared by every caller of this key.

        Raises:
            GrammarBusy: `max_pending` other grammars are compiling or queued.
        """
        key = (kind, text)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is not None:
                self._compiled.move_to_end(key)
                done: Future = Future()
                done.set_result(compiled)
                return done
            future = self._pending.get(key)
            if future is not None:
                return future
            if len(self._pending) >= self.max_pending:
                self.counters["busy"] += 1
                raise GrammarBusy(f"{len(self._pending)} structured-output grammars are compiling now (the most at "
                                  "once); retry shortly")
            if not self._take_new():
                self.counters["busy"] += 1
                raise GrammarBusy(f"new structured-output grammars are accepted at {self.new_per_s:g} per second "
                                  f"(bursts of {self.new_burst}) and that rate is used up; retry in a second (a "
                                  "schema used before is served from the cache at once)")
            future = self._executor.submit(self._compile_and_keep, key)
            self._pending[key] = future
        return future

    def _take_new(self) -> bool:
        """Spend one token of the new-grammar bucket (caller holds `_lock`); False when none is left."""
        if self.new_per_s <= 0:
            return True
        now = self._clock()
        self._allowance = min(float(self.new_burst), self._allowance + (now - self._refilled) * self.new_per_s)
        self._refilled = now
        if self._allowance < 1.0:
            return False
        self._allowance -= 1.0
        return True

    def matcher(self, kind: str, text: str):
        """A fresh matcher for the grammar, waiting at most `compile_timeout_s` for its compile.

        Raises:
            DossierError: the grammar is invalid (the message quotes it).
            GrammarBusy, GrammarTimeout: compiling it cannot start now, or took too long (retry).
        """
        future = self.compile(kind, text)
        try:
            compiled = future.result(timeout=self.compile_timeout_s)
        except FutureTimeout:
            self.counters["timeouts"] += 1
            raise GrammarTimeout(f"the {kind} did not compile within {self.compile_timeout_s:g} s; it goes on "
                                 "compiling and a retry may find it ready (a smaller schema compiles faster)") from None
        return self._xgr.GrammarMatcher(compiled)

    def _compile(self, kind: str, text: str):
        try:
            if kind == "json_schema":
                return self._compiler.compile_grammar(json_schema_grammar(text))
            if kind == "regex":
                return self._compiler.compile_regex(text)
            return self._compiler.compile_grammar(text)
        except DossierError:
            raise
        except Exception as err:  # xgrammar raises RuntimeError/ValueError with the parse error
            shown = text if len(text) < 200 else text[:200] + "..."
            raise DossierError(f"invalid {kind} for structured output ({err}): {shown}") from None

    def _compile_and_keep(self, key: tuple[str, str]):
        """Compile in a worker and move the result into the LRU before any caller sees it (a failed compile is not
        kept: the next caller of that key gets the error again)."""
        try:
            compiled = self._compile(*key)
        except BaseException:
            with self._lock:
                self._pending.pop(key, None)
            raise
        with self._lock:
            self._pending.pop(key, None)
            size = int(getattr(compiled, "memory_size_bytes", 0)) + len(key[1])
            self._compiled[key] = compiled
            self._sizes[key] = size
            self._bytes += size
            self.counters["compiled"] += 1
            while self._bytes > self.cache_bytes and len(self._compiled) > 1:
                old, _ = self._compiled.popitem(last=False)
                self._bytes -= self._sizes.pop(old)
                self.counters["evicted"] += 1
        return compiled

    def mask(self, logits: torch.Tensor, rows: list[int], matchers: list) -> None:
        """Set to -inf, in place, the logits of tokens each row's matcher forbids."""
        bitmask = self._xgr.allocate_token_bitmask(len(rows), self.vocab_size)
        for i, matcher in enumerate(matchers):
            matcher.fill_next_token_bitmask(bitmask, i)
        selected = logits[rows]
        self._xgr.apply_token_bitmask_inplace(selected, bitmask.to(logits.device), vocab_size=self.vocab_size)
        logits[rows] = selected
