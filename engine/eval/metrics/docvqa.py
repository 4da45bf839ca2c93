"""DocVQA-2026 binary scoring, following the competition's published `eval_utils.py`.

1. The answer is what follows the last "FINAL ANSWER:" in the model's output; without the
   marker the item is wrong (`require_marker=True`, the competition's rule). Dossier's agents
   return answers through a tool call, so by default an output without the marker is scored
   as it stands.
2. Strict match against each gold answer: when both start with a number, the numbers must be
   equal and the rest (the unit) identical; otherwise, when both are dates (six characters or
   more), the parsed calendar dates must be equal; version strings like 1.2.3 must be equal
   as text.
3. If any gold answer is numeric and nothing matched strictly, the item is wrong.
4. Otherwise: lower-case, punctuation -> spaces, drop the articles a/an/the, collapse spaces,
   and accept when the normalised Levenshtein similarity to some gold answer is >= 0.9.

One deliberate difference: dates missing a day or month are completed from 2000-01-01, not
from today's date as `dateutil`'s default does, so a score never depends on the day it runs.
"""

from __future__ import annotations

import re
import string
from datetime import date, datetime
from functools import lru_cache

from engine.eval.metrics.answers import levenshtein_within
from tools.errors import missing_dependency

__all__ = ["MARKER", "extract_final_answer", "docvqa_correct", "item_verdict", "parse_magnitude"]

MARKER = "FINAL ANSWER:"
ANLS_THRESHOLD = 0.9
_NUMBER_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(.*)$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TO_SPACE = str.maketrans(string.punctuation, " " * len(string.punctuation))
_DEFAULT_DATE = datetime(2000, 1, 1)


def extract_final_answer(output: str, require_marker: bool = False) -> str | None:
    """The text after the last "FINAL ANSWER:"; the whole output when absent (None if required)."""
    if MARKER in output:
        return output.split(MARKER)[-1].strip()
    return None if require_marker else output.strip()


def parse_magnitude(text: str) -> tuple[float, str] | tuple[None, None]:
    """Split "12.5 kg" into (12.5, "kg"); (None, None) when the text does not start with a number."""
    match = _NUMBER_UNIT.match(text.lower().strip())
    if not match:
        return None, None
    return float(match.group(1)), match.group(2).strip()


@lru_cache(maxsize=65536)  # a pure function of the text; gold strings repeat across items
def _parse_date(text: str) -> date | None:
    try:
        from dateutil import parser as date_parser
    except ImportError as err:  # pragma: no cover - python-dateutil is installed with the project today
        raise missing_dependency("python-dateutil (DocVQA date matching)", "pip install python-dateutil") from err
    try:
        return date_parser.parse(text, fuzzy=False, default=_DEFAULT_DATE).date()
    except (ValueError, TypeError, OverflowError):
        return None


def _strict_match(predicted: str, gold: str) -> bool:
    pred_value, pred_unit = parse_magnitude(predicted)
    gold_value, gold_unit = parse_magnitude(gold)
    if pred_value is not None and gold_value is not None and pred_value == gold_value:
        return pred_unit == gold_unit
    pred_clean, gold_clean = predicted.strip(), gold.strip()
    if _VERSION.match(pred_clean) or _VERSION.match(gold_clean):
        return pred_clean == gold_clean
    if len(pred_clean) >= 6 and len(gold_clean) >= 6:
        pred_date = _parse_date(pred_clean)
        return pred_date is not None and pred_date == _parse_date(gold_clean)
    return False


def _clean(text: str) -> str:
    text = text.lower().translate(_PUNCT_TO_SPACE)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _similar_enough(a: str, b: str) -> bool:
    """1 - distance / longer length >= 0.9, evaluated with the competition's float expression."""
    a, b = a.lower().strip(), b.lower().strip()
    if a == b:
        return True
    if not a or not b:
        return False
    longest = max(len(a), len(b))
    limit = int(longest * (1.0 - ANLS_THRESHOLD)) + 1
    while limit >= 0 and 1.0 - limit / longest < ANLS_THRESHOLD:  # the largest distance that still passes
        limit -= 1
    return limit >= 0 and levenshtein_within(a, b, limit) is not None


def docvqa_correct(output: str | list[str] | None, gold_answers: list[str], require_marker: bool = False) -> bool:
    """DocVQA-2026's binary verdict for one item.

    Args:
        output: the model output (or answer); a list answer is joined with ", " as the
            competition asks lists to be written.
        gold_answers: accepted answers as strings (a list variant joined with ", ").
        require_marker: the competition's rule that an output without "FINAL ANSWER:" is wrong.
    """
    if output is None:
        return False
    text = ", ".join(output) if isinstance(output, list) else str(output)
    answer = extract_final_answer(text, require_marker)
    if answer is None or not gold_answers:
        return False
    gold_is_numeric = False
    for gold in gold_answers:
        if _strict_match(answer, gold):
            return True
        gold_is_numeric = gold_is_numeric or parse_magnitude(gold)[0] is not None
    if gold_is_numeric:
        return False
    cleaned = _clean(answer)
    return any(_similar_enough(cleaned, _clean(gold)) for gold in gold_answers)


def item_verdict(question, prediction, options=None) -> bool:
    """The registered scorer (engine/eval/scorers.py): the raw output when the prediction kept it, else the answer;
    `options.docvqa_require_marker` (EvalConfig) applies the "FINAL ANSWER:" rule strictly."""
    answer = prediction.answer if prediction is not None else None
    raw_output = prediction.extra.get("raw_output") if prediction is not None else None
    return docvqa_correct(raw_output if isinstance(raw_output, str) else answer,
                          [", ".join(v) for v in question.answer_variants],
                          bool(getattr(options, "docvqa_require_marker", False)))
