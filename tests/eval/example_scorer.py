"""An example metric, the whole of it: one function. tests/eval/test_example_scorer.py registers it with one line.

"Short answer": the prediction answers in at most three words (a list answer counts its items' words).
It applies only to questions whose gold answer is itself short, so the test sees `applies` work too.
"""

from __future__ import annotations


def _words(answer) -> int:
    return sum(len(str(part).split()) for part in answer) if isinstance(answer, list) else len(str(answer).split())


def short_gold(question) -> bool:
    """Scored only where every gold variant is at most three words."""
    return all(_words(variant) <= 3 for variant in question.answer_variants)


def short_answer(question, prediction, options=None) -> bool:
    """True when the prediction's answer has at most three words (no prediction: False)."""
    return prediction is not None and prediction.answer is not None and _words(prediction.answer) <= 3
