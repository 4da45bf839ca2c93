"""Structured output with xgrammar: JSON schema, regex or EBNF enforced token by token.

Grammars are compiled once per (kind, text) and cached; each request gets its own
`GrammarMatcher`. Before sampling, the matcher's bitmask removes every token that
would break the grammar; after sampling, the token is fed to the matcher. When the
grammar is complete only the model's end-of-turn tokens stay allowed, so a tool call
always ends as a well-formed turn.

JSON schemas compile to compact JSON (no free whitespace). xgrammar 0.2's rule for
length-bounded strings admits raw control characters (U+0000-U+001F except CR, LF),
which JSON forbids and strict parsers reject; `json_schema_grammar` patches that rule
so every output parses with `json.loads`.
"""

import json
import threading

import torch

from tools.errors import DossierError, missing_dependency

__all__ = ["GrammarCache", "json_schema_grammar"]

_BOUNDED_STRING_CHAR = r'[^\"\\\r\n]'  # xgrammar's character class inside a string with minLength/maxLength
_JSON_STRING_CHAR = r'[^\0-\x1f\"\\]'  # what JSON allows unescaped


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
    """Compiles grammars for one tokenizer and hands out matchers."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: set[int]) -> None:
        try:
            import xgrammar
        except ImportError:
            raise missing_dependency("xgrammar", "pip install xgrammar") from None
        self._xgr = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self.vocab_size = vocab_size
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=2)
        self._compiled: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def matcher(self, kind: str, text: str):
        """A fresh matcher for the grammar (compiled on first use)."""
        with self._lock:
            compiled = self._compiled.get((kind, text))
            if compiled is None:
                try:
                    if kind == "json_schema":
                        compiled = self._compiler.compile_grammar(json_schema_grammar(text))
                    elif kind == "regex":
                        compiled = self._compiler.compile_regex(text)
                    else:
                        compiled = self._compiler.compile_grammar(text)
                except Exception as err:  # xgrammar raises RuntimeError/ValueError with the parse error
                    shown = text if len(text) < 200 else text[:200] + "..."
                    raise DossierError(f"invalid {kind} for structured output ({err}): {shown}") from None
                self._compiled[(kind, text)] = compiled
        return self._xgr.GrammarMatcher(compiled)

    def mask(self, logits: torch.Tensor, rows: list[int], matchers: list) -> None:
        """Set to -inf, in place, the logits of tokens each row's matcher forbids."""
        bitmask = self._xgr.allocate_token_bitmask(len(rows), self.vocab_size)
        for i, matcher in enumerate(matchers):
            matcher.fill_next_token_bitmask(bitmask, i)
        selected = logits[rows]
        self._xgr.apply_token_bitmask_inplace(selected, bitmask.to(logits.device), vocab_size=self.vocab_size)
        logits[rows] = selected
