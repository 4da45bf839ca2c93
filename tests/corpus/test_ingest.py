"""Ingest: idempotent, transactional per document, resumable after kill -9, bad files never stop a batch."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pdfs import make_encrypted_pdf, make_image_only_pdf, make_pdf
from tools.corpus import CorpusStore, IngestConfig, RenderSettings, ingest
from tools.errors import DossierError

ROOT = Path(__file__).resolve().parents[2]


def _folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    make_pdf(src / "alpha.pdf", ["Alpha revenue 2019", "Alpha costs"])
    make_pdf(src / "beta.pdf", ["Beta menu: spaghetti $18.00"])
    (src / "empty.pdf").write_bytes(b"")
    (src / "random.pdf").write_bytes(os.urandom(2000))
    make_encrypted_pdf(src / "locked.pdf", "locked words", "pw")
    make_image_only_pdf(src / "scan.pdf", "SCANNED")
    return src


def test_ingest_records_documents_pages_and_errors(tmp_path):
    summary = ingest([_folder(tmp_path)], tmp_path / "c", IngestConfig(workers=1))
    store = CorpusStore(tmp_path / "c")
    assert [d.id for d in store.documents()] == ["alpha", "beta", "scan"]
    assert summary.documents == 3 and summary.pages == 4
    reasons = {Path(e["path"]).name: e["reason"] for e in summary.errors}
    assert reasons == {
        "empty.pdf": "empty file (0 bytes)",
        "random.pdf": "not a PDF (no %PDF header in the first 1 KB)",
        "locked.pdf": "password-protected: re-run with --password",
    }
    assert {Path(e.source_path).name for e in store.errors()} == set(reasons)
    assert store.page("alpha", 1).text.startswith("Alpha revenue 2019")
    assert store.pages_needing_ocr() == [("scan", 1)]
    assert store.document("scan").status == "needs_ocr"
    words = store.page_words("alpha", 1)
    assert words.words[:2] == ["Alpha", "revenue"] and words.boxes.shape == (3, 4)


def test_rerun_is_idempotent_and_changed_files_are_reingested(tmp_path):
    src = _folder(tmp_path)
    ingest([src], tmp_path / "c", IngestConfig(workers=1))
    again = ingest([src], tmp_path / "c", IngestConfig(workers=1))
    assert again.documents == 0 and again.skipped == 3
    make_pdf(src / "beta.pdf", ["Beta menu changed", "and a new page"])
    third = ingest([src], tmp_path / "c", IngestConfig(workers=1))
    store = CorpusStore(tmp_path / "c")
    assert third.documents == 1 and store.document("beta").page_count == 2
    assert store.page("beta", 1).text.startswith("Beta menu changed")
    assert store.stats()["pages"] == 5


def test_password_ingests_and_decrypted_copy_renders(tmp_path):
    src = tmp_path / "s"
    make_encrypted_pdf(src / "locked.pdf", "locked words", "pw")
    summary = ingest([src], tmp_path / "c", IngestConfig(password="pw", workers=1))
    assert summary.documents == 1 and not summary.errors
    store = CorpusStore(tmp_path / "c")
    assert "locked words" in store.page("locked", 1).text
    assert store.render("locked", 1, RenderSettings(dpi=50)).size[0] > 0


def test_duplicate_stems_are_rejected_not_merged(tmp_path):
    make_pdf(tmp_path / "a" / "report.pdf", ["first"])
    make_pdf(tmp_path / "b" / "report.pdf", ["second"])
    summary = ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "c", IngestConfig(workers=1))
    assert summary.documents == 1
    assert "already taken" in summary.errors[0]["reason"]


def test_parallel_workers_give_the_same_store(tmp_path):
    src = tmp_path / "s"
    for i in range(10):
        make_pdf(src / f"d{i:02d}.pdf", [f"document {i} page {p}" for p in range(1, 4)])
    summary = ingest([src], tmp_path / "c", IngestConfig(workers=2))
    store = CorpusStore(tmp_path / "c")
    assert summary.documents == 10 and store.stats()["pages"] == 30
    assert store.page("d07", 3).text.strip() == "document 7 page 3"


def test_unknown_document_and_page_errors_are_clear(tmp_path):
    make_pdf(tmp_path / "s" / "report.pdf", ["x", "y"])
    ingest([tmp_path / "s"], tmp_path / "c", IngestConfig(workers=1))
    store = CorpusStore(tmp_path / "c")
    with pytest.raises(DossierError, match=r"page 9 does not exist in 'report' \(it has 2 pages\)"):
        store.page("report", 9)
    with pytest.raises(DossierError, match="unknown document 'reprot'.*did you mean 'report'"):
        store.document("reprot")
    with pytest.raises(DossierError, match="is not a corpus"):
        CorpusStore(tmp_path / "nothing")


def test_kill_during_ingest_leaves_whole_documents_and_rerun_completes(tmp_path):
    src = tmp_path / "src"
    for i in range(40):
        make_pdf(src / f"doc{i:02d}.pdf", [f"document {i} page {p} " * 50 for p in range(1, 16)])
    corpus = tmp_path / "c"
    cmd = [sys.executable, "-m", "engine.cli.main", "ingest", str(src), "--corpus", str(corpus),
           "--workers", "1", "--format", "json"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = corpus / "dossier.sqlite"
    deadline = time.time() + 120
    committed = 0
    while time.time() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    committed = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
            except sqlite3.Error:
                committed = 0
            if committed >= 3:
                break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert committed >= 3, "ingest finished before it could be killed mid-way"
    with sqlite3.connect(db) as conn:
        partial = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        bad = conn.execute("SELECT d.id FROM documents d LEFT JOIN pages p ON p.document = d.id "
                           "GROUP BY d.id HAVING COUNT(p.page) != d.page_count").fetchall()
    assert 3 <= partial < 40 and bad == []
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert report["documents"] == 40 - partial and report["skipped"] == partial
    store = CorpusStore(corpus)
    assert store.stats()["documents"] == 40 and store.stats()["pages"] == 600
    with sqlite3.connect(db) as conn:
        dupes = conn.execute("SELECT document, page, COUNT(*) FROM pages GROUP BY document, page HAVING COUNT(*) > 1").fetchall()
    assert dupes == []


def test_huge_page_renders_within_the_pixel_cap_without_exhausting_memory(tmp_path):
    """A 35000x35000-point page at 150 dpi would be 5 gigapixels; the cap bounds it."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=14400, height=14400)  # PDF's largest page; scaled by UserUnit below
    page.draw_rect(pymupdf.Rect(100, 100, 14000, 14000), color=(0, 0, 0), fill=(0.2, 0.4, 0.6))
    page.insert_text((500, 500), "HUGE", fontsize=400)
    doc.save(tmp_path / "huge.pdf")
    # VmHWM (this process's peak RSS) resets at exec; ru_maxrss would include the forking parent's
    code = (
        "from tools.corpus.render import RenderSettings, render_page\n"
        f"img = render_page({str(tmp_path / 'huge.pdf')!r}, 1, RenderSettings(dpi=600, max_pixels=4_000_000))\n"
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "print(img.size[0], img.size[1], int(hwm.split()[1]) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    width, height, peak_mb = map(int, out.split())
    assert width * height <= 4_000_000 and width > 1000
    assert peak_mb < 600, f"rendering a huge page peaked at {peak_mb} MB"


def test_render_is_cached(tmp_path):
    make_pdf(tmp_path / "s" / "doc.pdf", ["hello"])
    ingest([tmp_path / "s"], tmp_path / "c", IngestConfig(workers=1))
    store = CorpusStore(tmp_path / "c")
    first = store.render("doc", 1, RenderSettings(dpi=72))
    cached = list((tmp_path / "c" / "renders" / "doc").glob("*.png"))
    assert len(cached) == 1 and first.size == (595, 842)
    assert store.render("doc", 1, RenderSettings(dpi=72)).tobytes() == first.tobytes()


@pytest.mark.parametrize("size", [(595.0, 842.0), (612.0, 792.0), (300.5, 7000.25), (35000.0, 35000.0)])
@pytest.mark.parametrize("cap", [4096, 50_000, 1_003_520])
def test_the_pixel_cap_holds_after_rounding_each_side_up(size, cap):
    """The pixmap rounds width and height up; the scale accounts for it (188 x 266 once overshot a 50,000 cap)."""
    import math

    from tools.corpus.render import RenderSettings, render_scale

    scale = render_scale(*size, RenderSettings(dpi=300, max_pixels=cap))
    assert math.ceil(size[0] * scale) * math.ceil(size[1] * scale) <= cap
    assert size[0] * scale * size[1] * scale > 0.95 * cap  # and stays close to it


def crash_on_crasher(job, password, max_page_chars):
    """Stands in for `_extract_job` in the workers: 'crasher.pdf' kills its process as a MuPDF segfault would."""
    import os

    from tools.corpus.ingest import _extract_job

    if job.path.name == "crasher.pdf":
        os._exit(139)
    return _extract_job(job, password, max_page_chars)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_that_crashes_the_reader_fails_alone_and_the_rerun_retries_it(tmp_path, monkeypatch, workers):
    """Every file is read in a worker process (small batches too): a crash there costs that file only."""
    import importlib

    src = tmp_path / "src"
    for name in ("alpha", "crasher", "omega"):
        make_pdf(src / f"{name}.pdf", [f"{name} page"])
    corpus = tmp_path / "c"
    ingest_mod = importlib.import_module("tools.corpus.ingest")  # the package exports a function of that name
    monkeypatch.setattr(ingest_mod, "_extract_job", crash_on_crasher)  # sent to the workers by reference
    summary = ingest([src], corpus, IngestConfig(workers=workers))
    assert summary.documents == 2 and [Path(e["path"]).name for e in summary.errors] == ["crasher.pdf"]
    assert summary.errors[0]["reason"].startswith("the PDF crashed the PDF reader")
    monkeypatch.undo()
    again = ingest([src], corpus, IngestConfig(workers=workers))
    assert again.skipped == 2 and again.documents == 1 and again.errors == []
    assert {d.id for d in CorpusStore(corpus).documents()} == {"alpha", "crasher", "omega"}
