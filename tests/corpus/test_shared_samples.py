"""The robustness corpus in ../shared/data/pdf-samples (skipped when absent)."""

import pytest

from tools.corpus import CorpusStore, IngestConfig, ingest

pytestmark = pytest.mark.shared


def test_pdf_samples_ingest_with_clear_errors(shared_dir, tmp_path):
    src = shared_dir / "data" / "pdf-samples"
    summary = ingest([src], tmp_path / "c", IngestConfig(workers=2))
    errors = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in summary.errors}
    assert "ocrmypdf_invalid.pdf" in errors
    assert errors["005-libreoffice-writer-password_libreoffice-writer-password.pdf"].startswith("password-protected")
    total = len(list(src.glob("*.pdf")))
    assert summary.documents + len(summary.errors) == total
    store = CorpusStore(tmp_path / "c")
    flagged = {doc for doc, _ in store.pages_needing_ocr()}
    assert {"ocrmypdf_linn", "ocrmypdf_c02-22", "ocrmypdf_skew", "ocrmypdf_2400dpi"} <= flagged
    again = ingest([src], tmp_path / "c", IngestConfig(workers=2))
    assert again.documents == 0 and again.skipped == summary.documents
    with_password = ingest([src / "005-libreoffice-writer-password_libreoffice-writer-password.pdf"], tmp_path / "c",
                           IngestConfig(password="openpassword"))
    assert with_password.documents == 1
