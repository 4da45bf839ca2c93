"""Issue 45, finding 6: a hostile 8 KB PDF cannot hang ingest or grow it without bound.

Each document is read in a worker process with a deadline, a memory cap and a cap on a page's
characters; a document past one is recorded as an error saying which, and the batch goes on.
"""

import time
from pathlib import Path

import pytest

from tests.corpus.xobject_bomb import make_xobject_bomb, store_bomb_document
from tests.pdfs import make_pdf
from tools.corpus import CorpusStore, IngestConfig, ingest

DEADLINE_S = 3.0  # the per-document limit the tests set (the default is 120 s)
SLACK_S = 30.0  # starting worker processes on a busy 2-core machine; the old code never ended at all


def _batch(tmp_path: Path, bomb_depth: int = 40) -> Path:
    src = tmp_path / "src"
    bomb = make_xobject_bomb(src / "bomb.pdf", bomb_depth)
    assert bomb.stat().st_size < 10_000  # the whole attack is a few kilobytes
    for name in ("annual", "memo", "zeta"):
        make_pdf(src / f"{name}.pdf", [f"{name} revenue page {n}" for n in range(1, 3)])
    return src


def test_an_xobject_bomb_fails_at_the_deadline_and_the_good_pdfs_are_ingested(tmp_path):
    start = time.monotonic()
    summary = ingest([_batch(tmp_path)], tmp_path / "c", IngestConfig(doc_timeout_s=DEADLINE_S))
    elapsed = time.monotonic() - start
    assert elapsed < DEADLINE_S + SLACK_S, f"ingest took {elapsed:.1f} s with a {DEADLINE_S} s per-document limit"
    store = CorpusStore(tmp_path / "c")
    assert sorted(d.id for d in store.documents()) == ["annual", "memo", "zeta"]
    assert summary.documents == 3 and summary.pages == 6
    assert [Path(e["path"]).name for e in summary.errors] == ["bomb.pdf"]
    reason = summary.errors[0]["reason"]
    assert f"took longer than {DEADLINE_S:g} s" in reason and "--doc-timeout" in reason, reason
    assert [(Path(e.source_path).name, e.reason) for e in store.errors()] == [("bomb.pdf", reason)]
    assert store.page("zeta", 2).text.strip() == "zeta revenue page 2"


def test_the_bomb_fails_alone_with_parallel_workers_and_a_rerun_retries_only_it(tmp_path):
    src = _batch(tmp_path)
    summary = ingest([src], tmp_path / "c", IngestConfig(doc_timeout_s=DEADLINE_S, workers=2))
    assert summary.documents == 3 and [Path(e["path"]).name for e in summary.errors] == ["bomb.pdf"]
    assert "took longer than" in summary.errors[0]["reason"]
    again = ingest([src], tmp_path / "c", IngestConfig(doc_timeout_s=DEADLINE_S, workers=2))
    assert again.skipped == 3 and again.documents == 0 and [Path(e["path"]).name for e in again.errors] == ["bomb.pdf"]


def test_the_memory_cap_stops_a_growing_bomb_before_the_deadline(tmp_path):
    """RLIMIT_AS on the worker: the allocation that crosses it fails, and the document says so."""
    start = time.monotonic()
    summary = ingest([_batch(tmp_path)], tmp_path / "c", IngestConfig(doc_timeout_s=120, memory_mb=450))
    assert time.monotonic() - start < 100  # well before the deadline: memory ran out first
    assert summary.documents == 3 and [Path(e["path"]).name for e in summary.errors] == ["bomb.pdf"]
    reason = summary.errors[0]["reason"]
    assert "out of memory" in reason and "450 MB" in reason and "--memory-limit-mb" in reason, reason


def test_a_page_over_the_character_cap_makes_its_document_an_error(tmp_path):
    """A depth-14 bomb finishes quickly but holds 81,920 characters on one page."""
    src = _batch(tmp_path, bomb_depth=14)
    summary = ingest([src], tmp_path / "c", IngestConfig(max_page_chars=50_000))
    assert summary.documents == 3 and [Path(e["path"]).name for e in summary.errors] == ["bomb.pdf"]
    reason = summary.errors[0]["reason"]
    assert "page 1 has 81,920 characters" in reason and "50,000" in reason and "--max-page-chars" in reason, reason
    roomy = ingest([src], tmp_path / "c2", IngestConfig(max_page_chars=100_000))
    assert roomy.documents == 4 and roomy.errors == []  # under the cap it is an ordinary (if odd) page


def _store_with_bomb_and_scan(tmp_path: Path) -> CorpusStore:
    from tests.ocr.helpers import scanned_pdf

    scanned_pdf(tmp_path / "src" / "scan.pdf", [[(20, 60, "Scanned ledger")]])
    ingest([tmp_path / "src"], tmp_path / "c", IngestConfig())
    store = CorpusStore(tmp_path / "c")
    store_bomb_document(store, "bomb")  # no text layer: flagged for OCR
    assert store.pages_needing_ocr() == [("bomb", 1), ("scan", 1)]
    return store


class _FixedOcr:
    """Reads every image as the one word 'ledger' (the OCR step's drawing is what is under test)."""

    name = "fixed"

    def read(self, image):
        import numpy as np

        from tools.ocr.base import OcrResult

        return OcrResult(self.name, image.width, image.height, ["ledger"], np.array([[4, 4, 60, 20]], np.float32),
                         np.ones(1, np.float32), np.zeros((1, 3), np.int32))

    def close(self):
        pass


def test_ocr_draws_a_bomb_page_in_a_bounded_worker_and_reads_the_next_page(tmp_path, monkeypatch):
    """One OCR process (or surya's own worker): pages are drawn in a bounded worker and read here."""
    import tools.ocr.pages as pages
    from tools.ocr import OcrSettings, OcrStep

    store = _store_with_bomb_and_scan(tmp_path)
    monkeypatch.setattr(pages, "resolve_backend", lambda name: "fixed")
    monkeypatch.setattr(pages, "get_backend", lambda name, **kwargs: _FixedOcr())
    start = time.monotonic()
    outcome = OcrStep(OcrSettings(workers=1, timeout_s=DEADLINE_S))(store, store.pages_needing_ocr())
    assert time.monotonic() - start < DEADLINE_S + SLACK_S
    assert outcome.pages == 1 and store.page("scan", 1).text == "ledger"
    assert [(e["document"], e["page"]) for e in outcome.errors] == [("bomb", 1)]
    assert f"took longer than {DEADLINE_S:g} s" in outcome.errors[0]["reason"], outcome.errors[0]
    assert store.pages_needing_ocr() == [("bomb", 1)]  # stays flagged, recorded as an error


def test_parallel_ocr_workers_stop_a_bomb_page_and_read_the_others(tmp_path):
    """Several OCR processes: each page is drawn and read in a bounded worker with a real backend."""
    from tools.ocr import OcrSettings, OcrStep, resolve_backend

    if resolve_backend("auto") is None:
        pytest.skip("no OCR backend is installed (pip install rapidocr onnxruntime)")
    store = _store_with_bomb_and_scan(tmp_path)
    deadline = 8.0  # reading a real page on a busy 2-core machine takes 1-3 s
    settings = OcrSettings(workers=2, timeout_s=deadline, min_pixels=300_000, max_pixels=400_000)
    outcome = OcrStep(settings)(store, store.pages_needing_ocr())
    assert outcome.pages == 1 and "ledger" in store.page("scan", 1).text.lower()
    assert [(e["document"], e["page"]) for e in outcome.errors] == [("bomb", 1)]
    assert f"took longer than {deadline:g} s" in outcome.errors[0]["reason"], outcome.errors[0]


@pytest.mark.parametrize("field, value, words", [("doc_timeout_s", 0, "positive seconds"),
                                                 ("memory_mb", 100, "too small"),
                                                 ("max_page_chars", 10, "refuse ordinary pages")])
def test_unusable_limits_are_refused_with_the_value(field, value, words):
    from tools.errors import DossierError

    with pytest.raises(DossierError, match=words):
        IngestConfig(**{field: value})
