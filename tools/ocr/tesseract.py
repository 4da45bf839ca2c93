"""tesseract backend: Debian's `tesseract-ocr` binary, called directly (no Python wrapper needed).

Each image goes to `tesseract stdin stdout --psm 3 tsv` as PNG bytes; the TSV gives every word
with its box, confidence (0-100) and block/paragraph/line numbers in tesseract's own reading
order (it finds columns itself). `OMP_THREAD_LIMIT=1` is always set: tesseract's OpenMP
threads make it about 8x slower on a small shared machine, and ingest parallelises over
pages instead. A hard timeout bounds every call.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

import numpy as np
from PIL import Image

from tools.errors import DossierError, MissingDependencyError
from tools.ocr.base import OcrBackend, OcrError, OcrResult, empty_result

__all__ = ["TesseractBackend"]

INSTALL = "apt-get install tesseract-ocr"


class TesseractBackend(OcrBackend):
    """The tesseract binary (LSTM engine, automatic page segmentation).

    Args:
        language: tesseract language code(s), e.g. 'eng' or 'eng+fra' (packs tesseract-ocr-<lang>).
        timeout_s: seconds one image may take before the call is killed.
        binary: the executable (default: `tesseract` on PATH).
        binarize: send a black-and-white copy (Otsu threshold on luminance). Coloured cell fills
            and highlights otherwise make tesseract's page segmentation skip or garble the text
            on them (a yellow cell's "11.0%" came back as "10%"); plain scans read the same.
    """

    name = "tesseract"
    install_hint = INSTALL

    def __init__(self, language: str = "eng", timeout_s: float = 120.0, binary: str | None = None,
                 binarize: bool = True):
        self.binary = binary or shutil.which("tesseract")
        if self.binary is None:
            raise MissingDependencyError(f"tesseract is not installed; install it with: {INSTALL}")
        if timeout_s <= 0:
            raise DossierError(f"timeout_s must be positive, got {timeout_s}")
        self.language = language
        self.timeout_s = timeout_s
        self.binarize = binarize
        self._env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        missing = [lang for lang in language.split("+") if lang not in self.languages()]
        if missing:
            packs = " ".join(f"tesseract-ocr-{lang}" for lang in missing)
            raise MissingDependencyError(
                f"tesseract has no language data for {', '.join(missing)!s}; install it with: apt-get install {packs}")

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if shutil.which("tesseract") is None:
            return f"tesseract is not installed; install it with: {INSTALL}"
        return None

    def languages(self) -> set[str]:
        """The language packs this tesseract has."""
        try:
            proc = subprocess.run([self.binary, "--list-langs"], capture_output=True, text=True, timeout=30, env=self._env)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise OcrError(f"cannot run {self.binary}: {err}") from None
        return {line.strip() for line in proc.stdout.splitlines()[1:] if line.strip()}

    def read(self, image: Image.Image) -> OcrResult:
        rgb = image.convert("RGB")
        width, height = rgb.size
        if width < 4 or height < 4:
            return empty_result(self.name, width, height)
        buffer = io.BytesIO()
        (otsu_binarize(rgb) if self.binarize else rgb).save(buffer, format="PNG")
        command = [self.binary, "stdin", "stdout", "-l", self.language, "--psm", "3"]
        dpi = image.info.get("dpi")
        if dpi:  # tells tesseract the scale instead of letting it guess from glyph sizes
            command += ["--dpi", str(int(round(float(dpi[0]))))]
        command.append("tsv")
        try:
            proc = subprocess.run(command, input=buffer.getvalue(), capture_output=True, timeout=self.timeout_s,
                                  env=self._env)
        except subprocess.TimeoutExpired:
            raise OcrError(f"tesseract took more than {self.timeout_s:.0f} s on a {width}×{height} image; "
                           "it was stopped") from None
        except OSError as err:
            raise OcrError(f"cannot run {self.binary}: {err}") from None
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            raise OcrError(f"tesseract exited with code {proc.returncode}: {detail[-1] if detail else 'no message'}")
        return parse_tsv(proc.stdout.decode("utf-8", errors="replace"), width, height)


def otsu_binarize(image: Image.Image) -> Image.Image:
    """Black text on white: luminance thresholded at Otsu's level (the split that best separates two classes)."""
    gray = np.asarray(image.convert("L"))
    histogram = np.bincount(gray.ravel(), minlength=256).astype(np.float64)
    total = histogram.sum()
    levels = np.arange(256)
    weight0 = np.cumsum(histogram)  # pixels at or below each level
    mean0 = np.cumsum(histogram * levels)
    weight1 = total - weight0
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mean0[-1] * weight0 / total - mean0) ** 2 / (weight0 * weight1)
    between[~np.isfinite(between)] = 0
    level = int(np.argmax(between))
    if weight1[level] == 0 or weight0[level] == 0:  # a single colour: nothing to separate
        return image
    return Image.fromarray(np.where(gray > level, 255, 0).astype(np.uint8), mode="L")


def parse_tsv(tsv: str, width: int, height: int) -> OcrResult:
    """Turn tesseract's TSV output into an `OcrResult` (words of level 5, in its reading order).

    Line numbers count (paragraph, line) pairs within each block, so they are unique in a block.
    """
    rows = tsv.splitlines()
    if not rows:
        return empty_result("tesseract", width, height)
    header = rows[0].split("\t")
    try:
        col = {name: header.index(name) for name in
               ("level", "block_num", "par_num", "line_num", "word_num", "left", "top", "width", "height", "conf", "text")}
    except ValueError:
        raise OcrError(f"tesseract wrote no TSV header (got {rows[0][:80]!r})") from None
    words, boxes, confidences, lines = [], [], [], []
    line_ids: dict[tuple[int, int, int], int] = {}
    for row in rows[1:]:
        cells = row.split("\t")
        if len(cells) < len(header) or cells[col["level"]] != "5":
            continue
        text = cells[col["text"]].strip()
        if not text:
            continue
        block, par, line = int(cells[col["block_num"]]), int(cells[col["par_num"]]), int(cells[col["line_num"]])
        line_no = line_ids.setdefault((block, par, line), sum(1 for key in line_ids if key[0] == block))
        left, top = float(cells[col["left"]]), float(cells[col["top"]])
        words.append(text)
        boxes.append((left, top, left + float(cells[col["width"]]), top + float(cells[col["height"]])))
        confidences.append(max(float(cells[col["conf"]]), 0.0) / 100.0)
        lines.append((block, line_no, int(cells[col["word_num"]])))
    if not words:
        return empty_result("tesseract", width, height)
    return OcrResult("tesseract", width, height, words, np.array(boxes, np.float32),
                     np.array(confidences, np.float32), np.array(lines, np.int32))
