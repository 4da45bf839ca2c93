"""Ingest OCRs pages without a usable text layer: searchable, recorded per backend, failures isolated."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from tests.ocr.helpers import scanned_pdf
from tests.pdfs import make_pdf
from tools.corpus import CorpusStore, IngestConfig, ingest
from tools.ocr import OcrSettings, OcrStep, ocr_pdf_page, resolve_backend
from tools.ocr.base import OcrError

BACKEND = resolve_backend("auto")
pytestmark = pytest.mark.skipif(BACKEND is None, reason="no OCR backend installed")
runner = CliRunner()


def _config(**settings) -> IngestConfig:
    return IngestConfig(workers=1, ocr=OcrStep(OcrSettings(**{"workers": 1, **settings})))


def test_scanned_page_is_ocred_located_and_searchable(tmp_path):
    scanned_pdf(tmp_path / "in" / "notice.pdf", [[(20, 60, "Harbor Street maintenance"), (20, 140, "Millbrook 2024")]])
    make_pdf(tmp_path / "in" / "memo.pdf", ["Warehouse relocation memo"])
    summary = ingest([tmp_path / "in"], tmp_path / "c", _config())
    assert summary.ocr_pages == 1 and summary.ocr_backend == BACKEND and summary.ocr_errors == []
    store = CorpusStore(tmp_path / "c")
    page = store.page("notice", 1)
    assert page.text_source == f"ocr:{BACKEND}" and not page.needs_ocr and "Harbor Street" in page.text
    assert store.document("notice").status == "ok" and store.page("memo", 1).text_source == "pdf"
    words = store.page_words("notice", 1)
    harbor = words.boxes[words.words.index("Harbor")]
    # inserted at x = 20 pt with its baseline at y = 60 pt (16 pt font): the OCR box is there, in points
    assert 17 < harbor[0] < 23 and 44 < harbor[1] < 60 and 55 < harbor[3] < 64, harbor
    assert words.confidences is not None and len(words.confidences) == len(words.words)

    from tools.search import Searcher, build_index

    build_index(store)
    hits = Searcher(tmp_path / "c").search('"harbor street"', k=3)
    assert [(h.document, h.page) for h in hits] == [("notice", 1)]


def test_rotated_page_ocr_words_share_the_text_layer_frame(tmp_path):
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=200, height=400)
    page.set_rotation(90)  # displayed 400 × 200, text upright on screen
    page.insert_text((60, 380), "Rotated ledger entries", fontsize=16, rotate=90)
    doc.save(tmp_path / "rot.pdf")
    text_layer = {w[4]: w[:4] for w in doc[0].get_text("words")}
    from tools.ocr import get_backend

    with get_backend(BACKEND, threads=1) as ocr:
        result = ocr_pdf_page(ocr, tmp_path / "rot.pdf", 1, OcrSettings())
    assert "ledger" in result.words
    ox0, oy0, ox1, oy1 = result.boxes[result.words.index("ledger")]
    x0, y0, x1, y1 = text_layer["ledger"]
    overlap = max(0, min(ox1, x1) - max(ox0, x0)) * max(0, min(oy1, y1) - max(oy0, y0))
    assert overlap > 0.7 * (ox1 - ox0) * (oy1 - oy0), (result.boxes[result.words.index("ledger")], text_layer["ledger"])


def test_a_failing_page_is_recorded_stays_flagged_and_is_retried(tmp_path, monkeypatch):
    scanned_pdf(tmp_path / "in" / "good.pdf", [[(20, 60, "Readable scan")]])
    scanned_pdf(tmp_path / "in" / "bad.pdf", [[(20, 60, "Unlucky scan")]])
    import tools.ocr.pages as pages

    real = pages.ocr_pdf_page

    def flaky(backend, pdf_path, page, settings, **kwargs):  # kwargs: the bounded renderer OcrStep passes
        if "bad" in str(pdf_path):
            raise OcrError("engine crashed on this page")
        return real(backend, pdf_path, page, settings, **kwargs)

    monkeypatch.setattr(pages, "ocr_pdf_page", flaky)
    summary = ingest([tmp_path / "in"], tmp_path / "c", _config())
    assert summary.ocr_pages == 1 and summary.documents == 2
    assert summary.ocr_errors == [{"document": "bad", "page": 1,
                                   "reason": f"OCR ({BACKEND}) failed on page 1: engine crashed on this page"}]
    store = CorpusStore(tmp_path / "c")
    assert store.pages_needing_ocr() == [("bad", 1)] and "Readable" in store.page("good", 1).text
    assert [e.source_path.endswith("bad.pdf#page=1") for e in store.errors()] == [True]

    monkeypatch.setattr(pages, "ocr_pdf_page", real)  # the engine works again: the next ingest retries
    again = ingest([tmp_path / "in"], tmp_path / "c", _config())
    assert again.skipped == 2 and again.ocr_pages == 1 and again.ocr_errors == []
    assert store.pages_needing_ocr() == [] and store.errors() == [] and "Unlucky" in store.page("bad", 1).text


def test_force_ocr_rereads_only_pages_ocr_read_before(tmp_path):
    scanned_pdf(tmp_path / "in" / "scan.pdf", [[(20, 60, "Page one scan")], [(20, 60, "Page two scan")]])
    make_pdf(tmp_path / "in" / "typed.pdf", ["Typed text layer"])
    assert ingest([tmp_path / "in"], tmp_path / "c", _config()).ocr_pages == 2
    assert ingest([tmp_path / "in"], tmp_path / "c", _config()).ocr_pages == 0  # nothing flagged: no OCR
    forced = ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1, force_ocr=True,
                                                                    ocr=OcrStep(OcrSettings(workers=1))))
    assert forced.ocr_pages == 2
    assert CorpusStore(tmp_path / "c").page("typed", 1).text_source == "pdf"


def test_text_layer_corpora_never_start_ocr(tmp_path):
    make_pdf(tmp_path / "a.pdf", ["Plain text page"])
    calls = []

    def hook(store, pages):
        calls.append(pages)
        raise AssertionError("OCR must not run")

    summary = ingest([tmp_path / "a.pdf"], tmp_path / "c", IngestConfig(workers=1, ocr=hook))
    assert summary.documents == 1 and calls == [] and summary.ocr_backend is None


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr not installed")
def test_parallel_ocr_workers_read_every_page(tmp_path):
    scanned_pdf(tmp_path / "s.pdf", [[(20, 60, f"Parallel page {n}")] for n in ("alpha", "bravo", "charlie")])
    seen = []
    step = OcrStep(OcrSettings(backend="tesseract", workers=2), progress=lambda d, t, b: seen.append((d, t, b)))
    summary = ingest([tmp_path / "s.pdf"], tmp_path / "c", IngestConfig(workers=1, ocr=step))
    assert summary.ocr_pages == 3 and seen[-1] == (3, 3, "tesseract")
    store = CorpusStore(tmp_path / "c")
    assert [store.page("s", n).text.split()[-1] for n in (1, 2, 3)] == ["alpha", "bravo", "charlie"]


def test_cli_ingest_ocrs_the_sample_notice_and_none_skips_it(tmp_path):
    from engine.cli.main import app

    assert runner.invoke(app, ["sample", "--out", str(tmp_path / "s")]).exit_code == 0
    skipped = runner.invoke(app, ["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"), "--ocr", "none"])
    assert skipped.exit_code == 0 and "OCR skipped (--ocr none): 1 page stays flagged" in skipped.output
    result = runner.invoke(app, ["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ocr_pages"] == 1 and report["ocr_backend"] == BACKEND and report["ocr_errors"] == []
    assert report["corpus"]["pages_needing_ocr"] == 0
    shown = runner.invoke(app, ["corpus", "show", "--corpus", str(tmp_path / "c"), "water-authority-notice", "1"])
    assert f"text from ocr:{BACKEND}" in shown.output and "Harbor Street" in shown.output


def test_cli_names_the_install_command_for_a_missing_backend(tmp_path):
    import subprocess
    import sys

    if resolve_backend("auto") == "surya":
        pytest.skip("surya is configured here")
    make_pdf(tmp_path / "a.pdf", ["text"])
    proc = subprocess.run([sys.executable, "-m", "engine.cli.main", "ingest", str(tmp_path / "a.pdf"), "--corpus",
                           str(tmp_path / "c"), "--ocr", "surya"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "surya" in proc.stderr
    assert "pip install surya-ocr" in proc.stderr or "DETECTOR_MODEL_CHECKPOINT" in proc.stderr
    assert not (tmp_path / "c").exists()  # failed before ingesting anything
