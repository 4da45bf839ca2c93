"""The scanned samples in ../shared become searchable after ingest; OCR text matches linn's reference."""

import pytest

from tools.ocr import backend_status, char_accuracy

pytestmark = pytest.mark.shared

SCANS = {  # sample -> a word printed on it (skew is linn scanned askew: the same words)
    "ocrmypdf_2400dpi": "kruidnagel",
    "ocrmypdf_c02-22": "Watson",
    "ocrmypdf_skew": "Tarzana",
    "ocrmypdf_linn": "LinnSequencer",
}


def _ingest_and_search(shared_dir, tmp_path, backend: str, names: list[str]) -> dict:
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.ocr import OcrSettings, OcrStep
    from tools.search import Searcher, build_index

    if backend_status()[backend]:
        pytest.skip(backend_status()[backend])
    samples = shared_dir / "data" / "pdf-samples"
    step = OcrStep(OcrSettings(backend=backend, workers=2))
    summary = ingest([samples / f"{name}.pdf" for name in names], tmp_path / "c", IngestConfig(workers=1, ocr=step))
    assert summary.ocr_pages == len(names) and summary.ocr_errors == []
    store = CorpusStore(tmp_path / "c")
    build_index(store)
    searcher = Searcher(tmp_path / "c")
    for name in names:
        hits = searcher.search(SCANS[name], k=5)  # skew is a skewed scan of linn: both hold its word
        assert name in [h.document for h in hits], (name, SCANS[name], hits)
        assert store.page(name, 1).text_source == f"ocr:{backend}"
    return {name: store.page(name, 1).text for name in names}


def test_small_scans_become_searchable_with_the_default_backend(shared_dir, tmp_path):
    from tools.ocr import resolve_backend

    backend = resolve_backend("auto")
    if backend is None:
        pytest.skip("no OCR backend installed")
    _ingest_and_search(shared_dir, tmp_path, backend, ["ocrmypdf_2400dpi", "ocrmypdf_c02-22"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tesseract", "rapidocr"])
def test_all_scans_searchable_and_linn_accurate(shared_dir, tmp_path, backend):
    texts = _ingest_and_search(shared_dir, tmp_path, backend, list(SCANS))
    reference = (shared_dir / "data" / "pdf-samples" / "ocrmypdf_linn.txt").read_text()
    assert char_accuracy(texts["ocrmypdf_linn"], reference) > 0.97
