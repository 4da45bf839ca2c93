"""Page F1 / Doc F1 (MADQA's edge cases, string pages), hop types and the error taxonomy."""

import pytest

from engine.datasets.formats import Evidence, Prediction
from engine.eval.metrics.page_doc_f1 import doc_prf, hop_type, page_prf
from engine.eval.taxonomy import classify_error, is_verbose, taxonomy_summary

from . import madqa_reference

E = Evidence


def test_page_and_doc_f1_hand_computed():
    gold = [E("a", 1), E("a", 2), E("b", 5)]
    cited = [E("a", 1), E("a", 3)]
    page = page_prf(cited, gold)  # 1 hit of 2 cited, of 3 gold
    assert (page.precision, page.recall) == (0.5, pytest.approx(1 / 3))
    assert page.f1 == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))  # 0.4
    doc = doc_prf(cited, gold)  # cited {a}, gold {a, b}
    assert (doc.precision, doc.recall, doc.f1) == (1.0, 0.5, pytest.approx(2 / 3))


def test_f1_edge_cases():
    assert page_prf([], [E("a", 1)]).f1 == 0.0  # no citations -> 0
    assert page_prf([E("a", 1)], []).f1 == 0.0  # empty gold -> 0 (MADQA's harness)
    assert doc_prf([], []).f1 == 0.0
    assert page_prf([E("b", 9)], [E("a", 1)]).f1 == 0.0  # no overlap: P + R = 0
    assert page_prf([E("a", 1), E("a", 1)], [E("a", 1)]).f1 == 1.0  # duplicates count once


def test_string_pages_are_normalised_where_madqa_misses_them():
    raw = {"id": "q", "question": "?", "answer": "x", "citations": [{"document": "a", "page": "1"}]}
    prediction = Prediction.from_json(raw, "test")
    gold = [{"document": "a", "page": 1}]
    assert page_prf(prediction.citations, [E("a", 1)]).f1 == 1.0
    assert madqa_reference.citation_f1(raw["citations"], gold, "page") == 0.0  # the harness's silent miss


def test_hop_type():
    assert hop_type([E("a", 1)]) == "single"
    assert hop_type([E("a", 1), E("a", 1)]) == "single"
    assert hop_type([E("a", 1), E("a", 4)]) == "cross_page"
    assert hop_type([E("a", 1), E("b", 1)]) == "cross_doc"
    assert hop_type([]) == "single"


@pytest.mark.parametrize(
    ("correct", "answer", "cited", "has_prediction", "expected"),
    [
        (True, "x", [], True, "correct"),  # correct wins even without citations
        (False, None, [], False, "refusal"),  # no prediction at all
        (False, "", [E("a", 1)], True, "refusal"),  # empty answer
        (False, "I could not find it", [E("a", 1)], True, "refusal"),
        (False, "wrong", [], True, "retrieval_failure"),  # nothing cited
        (False, "wrong", [E("z", 1)], True, "retrieval_failure"),  # no gold document
        (False, "wrong", [E("a", 9)], True, "navigation_failure"),  # gold document, wrong page
        (False, "wrong", [E("z", 1), E("a", 2)], True, "comprehension_failure"),  # a gold page cited
    ],
)
def test_taxonomy_cascade(correct, answer, cited, has_prediction, expected):
    assert classify_error(correct, answer, cited, [E("a", 2), E("b", 3)], has_prediction) == expected


def test_taxonomy_without_gold_evidence_and_summary():
    assert classify_error(False, "wrong", [E("a", 1)], []) == "unclassified"
    summary = taxonomy_summary(["correct", "correct", "retrieval_failure", "refusal"])
    assert summary["counts"]["correct"] == 2 and summary["errors"] == 2
    assert summary["shares"]["refusal"] == 0.25
    assert summary["error_shares"]["retrieval_failure"] == 0.5
    assert summary["error_shares"]["navigation_failure"] == 0.0
    assert taxonomy_summary([])["n"] == 0


@pytest.mark.parametrize(
    "answer, exact, semantic, source, expected",
    [
        (["member ID GL-20417 on the form"], False, None, None, True),  # 6 words > 2 x 1 and 5 more
        (["GL 20417"], False, None, None, False),  # 2 words: a spelling, not verbosity
        (["ID GL-20417 here"], False, None, None, False),  # 3 words > 2 x 1 but only 2 more
        (["GL-20417"], True, None, None, False),  # exact is never verbose
        (["GL-20417, which is the member ID"], False, 0.5, "judge", True),  # the judge's partial, longer
        (["GL-20417, 12"], False, 0.5, "judge", True),  # longer than the gold: partial counts as verbose
        (["GL-20417"], False, 0.5, "judge", False),  # partial for format, not length
        (["the member ID is GL-20417 as printed"], False, 1.0, "judge", False),  # the judge accepted the extra
    ],
)
def test_correct_verbose_rule(answer, exact, semantic, source, expected):
    assert is_verbose(answer, [["GL-20417"], ["GL20417"]], exact, semantic, source) is expected


def test_correct_verbose_class_and_summary():
    assert classify_error(True, "x y z w", [], [E("a", 1)], verbose=True) == "correct_verbose"
    summary = taxonomy_summary(["correct", "correct_verbose", "correct", "correct", "refusal"])
    assert summary["errors"] == 1 and summary["error_shares"] == {
        "retrieval_failure": 0.0, "navigation_failure": 0.0, "comprehension_failure": 0.0, "refusal": 1.0,
        "unclassified": 0.0}
    assert summary["verbose_share"] == 0.25  # one of four correct items (MADQA reports 5 %)


def test_old_report_without_verbose_class_renders():
    from engine.eval.reports.markdown import taxonomy_rows

    old = {"taxonomy": {"counts": {"correct": 3, "retrieval_failure": 1, "navigation_failure": 0,
                                   "comprehension_failure": 0, "refusal": 0, "unclassified": 0},
                        "shares": {"correct": 0.75, "retrieval_failure": 0.25}, "error_shares": {}}}
    labels = [row[0] for row in taxonomy_rows(old)]
    assert labels[0] == "correct" and not any("verbose" in label for label in labels)
