"""What one generation request asks for: decoding, stopping and structure."""

import json
from dataclasses import dataclass, field

from tools.errors import DossierError

__all__ = ["SamplingParams"]


@dataclass(slots=True)
class SamplingParams:
    # 0 means greedy (argmax); otherwise logits are divided by it before sampling.
    temperature: float = 0.0
    # Keep the smallest set of tokens whose probability sums to at least top_p (1.0 = off).
    top_p: float = 1.0
    # Keep the top_k most likely tokens (0 = off).
    top_k: int = 0
    # Seed of this request's random generator; None derives one from the engine seed and request id.
    seed: int | None = None
    # Most tokens to generate in this turn.
    max_new_tokens: int = 64
    # Stop tokens are masked out until this many tokens have been generated.
    min_new_tokens: int = 0
    # Extra token ids that end the turn (the model's end-of-turn tokens always do unless ignore_eos).
    stop_token_ids: list[int] = field(default_factory=list)
    # Strings that end the turn once they appear in the generated text.
    stop: list[str] = field(default_factory=list)
    # Do not stop at the model's end-of-turn tokens (benchmarks with fixed output lengths).
    ignore_eos: bool = False
    # Structured output (at most one): a JSON schema (dict or JSON text), a regular
    # expression, or an EBNF grammar (xgrammar dialect), enforced on every token.
    json_schema: dict | str | None = None
    regex: str | None = None
    grammar: str | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise DossierError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise DossierError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise DossierError(f"top_k must be >= 0 (got {self.top_k})")
        if self.max_new_tokens < 1:
            raise DossierError(f"max_new_tokens must be >= 1 (got {self.max_new_tokens})")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise DossierError(
                f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}] (got {self.min_new_tokens})"
            )
        given = [name for name in ("json_schema", "regex", "grammar") if getattr(self, name) is not None]
        if len(given) > 1:
            raise DossierError(f"give at most one of json_schema, regex, grammar (got {', '.join(given)})")
        if isinstance(self.json_schema, str):
            try:
                json.loads(self.json_schema)
            except json.JSONDecodeError as err:
                raise DossierError(f"json_schema is not valid JSON: {err}") from None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def structure(self) -> tuple[str, str] | None:
        """(kind, text) of the structured-output constraint, or None."""
        if self.json_schema is not None:
            # key order is meaningful: xgrammar emits object properties in schema order
            text = self.json_schema if isinstance(self.json_schema, str) else json.dumps(self.json_schema)
            return ("json_schema", text)
        if self.regex is not None:
            return ("regex", self.regex)
        if self.grammar is not None:
            return ("grammar", self.grammar)
        return None
