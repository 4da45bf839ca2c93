"""Each installed backend reads known text with boxes where the text is; surya never hangs."""

import shutil
import sys
import textwrap
import time

import numpy as np
import pytest

from tests.ocr.helpers import text_image
from tools.errors import DossierError, MissingDependencyError
from tools.ocr import OCR_CHOICES, backend_status, get_backend, resolve_backend
from tools.ocr.base import OcrError
from tools.ocr.surya import SuryaBackend, SuryaConfig
from tools.ocr.tesseract import parse_tsv

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None,
                                     reason="Debian's tesseract-ocr is not installed (apt-get install tesseract-ocr)")
LINES = [(20, 40, "Quarterly revenue 48,250"), (20, 90, "Harbor Street notice")]


def _check_words(result, truth):
    """Every true word is read; its OCR box (tight on the ink) lies inside the text-layer box
    (which spans the font's full line height) and spans the same x range."""
    found = {w: b for w, b in zip(result.words, result.boxes)}
    for word, box in truth:
        assert word in found, (word, result.words)
        ox0, oy0, ox1, oy1 = found[word]
        x0, y0, x1, y1 = box
        overlap = max(0, min(ox1, x1) - max(ox0, x0)) * max(0, min(oy1, y1) - max(oy0, y0))
        assert overlap > 0.8 * (ox1 - ox0) * (oy1 - oy0), (word, found[word], box)
        assert abs(ox0 - x0) < 8 and abs(ox1 - x1) < 8, (word, found[word], box)


@needs_tesseract
def test_tesseract_reads_words_boxes_confidences_and_order():
    image, truth = text_image(LINES)
    with get_backend("tesseract") as ocr:
        result = ocr.read(image)
    _check_words(result, truth)
    assert result.words == [w for w, _ in truth]  # reading order
    assert np.all((result.confidences > 0.5) & (result.confidences <= 1))
    assert result.text == "Quarterly revenue 48,250\n\nHarbor Street notice" or "\n" in result.text
    norm = result.normalized_boxes
    assert norm.min() >= 0 and norm.max() <= 1
    assert np.allclose(norm[:, 0] * image.width, result.boxes[:, 0])


def test_rapidocr_reads_words_with_their_own_boxes():
    if backend_status()["rapidocr"]:
        pytest.skip(backend_status()["rapidocr"])
    image, truth = text_image(LINES)
    with get_backend("rapidocr", threads=1) as ocr:
        result = ocr.read(image)
    _check_words(result, truth)
    assert result.words == [w for w, _ in truth]
    pairs = [tuple(x) for x in result.lines[:, :2].tolist()]
    assert result.backend == "rapidocr" and len(set(pairs[:3])) == 1 and len(set(pairs[3:])) == 1
    assert pairs[0] < pairs[3]  # the first line comes first in reading order


def test_blank_image_reads_as_no_words():
    from PIL import Image

    backend = "tesseract" if shutil.which("tesseract") else "rapidocr"
    with get_backend(backend, threads=1) as ocr:
        result = ocr.read(Image.new("RGB", (300, 200), "white"))
    assert len(result) == 0 and result.text == ""


def test_tsv_parser_numbers_lines_within_blocks():
    tsv = textwrap.dedent("""\
        level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext
        5\t1\t1\t1\t1\t1\t10\t10\t30\t12\t96.5\tNet
        5\t1\t1\t1\t1\t2\t45\t10\t40\t12\t91\tincome
        5\t1\t1\t2\t1\t1\t10\t40\t30\t12\t88\tTotal
        4\t1\t2\t1\t1\t0\t300\t10\t50\t12\t-1\t
        5\t1\t2\t1\t1\t1\t300\t10\t50\t12\t77\t5,363
        """)
    result = parse_tsv(tsv, 400, 100)
    assert result.words == ["Net", "income", "Total", "5,363"]
    assert result.lines.tolist() == [[1, 0, 1], [1, 0, 2], [1, 1, 1], [2, 0, 1]]
    assert np.allclose(result.boxes[1], [45, 10, 85, 22]) and np.isclose(result.confidences[0], 0.965)
    assert result.text == "Net income\nTotal\n\n5,363"


def test_choices_and_errors_name_the_fix(monkeypatch):
    assert OCR_CHOICES == ("auto", "rapidocr", "tesseract", "surya", "none")
    assert resolve_backend("none") is None
    with pytest.raises(DossierError, match="unknown OCR backend 'abby'.*auto, rapidocr"):
        resolve_backend("abby")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="apt-get install tesseract-ocr"):
        resolve_backend("tesseract")
    monkeypatch.delenv("DETECTOR_MODEL_CHECKPOINT", raising=False)
    reason = SuryaBackend.unavailable_reason()
    assert "pip install surya-ocr" in reason or "DETECTOR_MODEL_CHECKPOINT" in reason
    assert resolve_backend("auto") in (None, "rapidocr")  # no tesseract now; surya unconfigured


_SCRIPTED_WORKER = """
import json, sys, time
print("some library chatter", flush=True)
print(json.dumps({"ready": True, "api": "scripted"}), flush=True)
for raw in sys.stdin:
    request = json.loads(raw)
    if MODE == "hang":
        time.sleep(600)
    print(json.dumps({"lines": [
        {"text": "Total revenue", "bbox": [10, 10, 110, 30], "polygon": None, "confidence": 0.9, "words": None},
        {"text": "48,250", "bbox": [200, 10, 260, 30], "polygon": None, "confidence": 0.8,
         "words": [{"text": "48,250", "bbox": [200, 10, 260, 30], "confidence": 0.85}]}]}), flush=True)
"""


def _scripted(tmp_path, mode: str, page_timeout: float = 30.0) -> SuryaBackend:
    script = tmp_path / f"worker_{mode}.py"
    script.write_text(f"MODE = {mode!r}\n" + _SCRIPTED_WORKER)
    return SuryaBackend(SuryaConfig(command=[sys.executable, str(script)], startup_timeout_s=30, page_timeout_s=page_timeout))


def test_surya_protocol_turns_worker_lines_into_words(tmp_path):
    from PIL import Image

    backend = _scripted(tmp_path, "ok")
    try:
        result = backend.read(Image.new("RGB", (300, 50), "white"))
    finally:
        backend.close()
    assert result.words == ["Total", "revenue", "48,250"] and result.backend == "surya"
    assert result.lines[:, 1].tolist() == [0, 0, 0]  # one row: a label and its value
    assert np.isclose(result.confidences[2], 0.85) and np.allclose(result.boxes[2], [200, 10, 260, 30])


def test_a_hung_surya_worker_is_stopped_at_the_timeout(tmp_path):
    from PIL import Image

    backend = _scripted(tmp_path, "hang", page_timeout=1.0)
    start = time.perf_counter()
    with pytest.raises(OcrError, match="within 1 s; the worker was stopped"):
        backend.read(Image.new("RGB", (100, 50), "white"))
    assert time.perf_counter() - start < 15
    assert backend._proc is None  # the worker is gone; the next page starts a fresh one


@pytest.mark.gpu
@pytest.mark.skipif(SuryaBackend.unavailable_reason() is not None,
                    reason=f"surya not usable here: {SuryaBackend.unavailable_reason()}")
def test_real_surya_reads_known_words():
    image, truth = text_image(LINES, dpi=200)
    with get_backend("surya") as ocr:
        result = ocr.read(image)
    assert {"Quarterly", "revenue", "Harbor", "Street"} <= set(result.words), result.words
