"""The sample suite: documents as described, every gold page holds its answer."""

from engine.datasets import load_questions
from engine.datasets.sample import SAMPLE_DOCUMENTS, write_sample_suite
from tools.corpus import CorpusStore, IngestConfig, ingest


def test_sample_suite_gold_pages_contain_the_answers(tmp_path):
    info = write_sample_suite(tmp_path / "s")
    assert info["documents"] == 6 and info["question_count"] == 20
    questions, errors = load_questions(info["questions"])
    assert errors == [] and len(questions) == 20
    hops = {q.extra["hop_type"] for q in questions}
    assert hops == {"single", "cross-page", "cross-document"}
    summary = ingest([info["pdfs"]], tmp_path / "c", IngestConfig(workers=1))
    assert summary.documents == 6 and not summary.errors
    store = CorpusStore(tmp_path / "c")
    assert store.pages_needing_ocr() == [(SAMPLE_DOCUMENTS[-1], 1)]  # the scanned notice
    for q in questions:
        assert q.evidence, q.id
        if q.extra["hop_type"] != "single" or q.evidence[0].document == SAMPLE_DOCUMENTS[-1]:
            continue
        text = store.page(q.evidence[0].document, q.evidence[0].page).text
        assert any(variant[0] in text for variant in q.answer_variants), (q.id, q.answer_variants)


def test_sample_suite_is_byte_identical_across_runs(tmp_path):
    """Re-running `make demo` must not make ingest see changed files (and re-run the agent on a new corpus)."""
    write_sample_suite(tmp_path / "a")
    write_sample_suite(tmp_path / "b")
    for pdf in sorted((tmp_path / "a" / "pdfs").glob("*.pdf")):
        assert pdf.read_bytes() == (tmp_path / "b" / "pdfs" / pdf.name).read_bytes(), pdf.name
