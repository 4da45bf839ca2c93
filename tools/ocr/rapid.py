"""rapidocr backend: PP-OCRv6 detection and recognition on onnxruntime, models shipped in the wheel.

rapidocr 3.10 carries `PP-OCRv6_det_small.onnx`, `PP-OCRv6_rec_small.onnx` and the angle
classifier inside its package folder. We pass those paths explicitly: given only a model
folder, rapidocr checks each file's sha256 against its download list and fetches any it
does not find, which must never happen on an air-gapped machine. A wheel without the files
makes the backend unavailable instead.

rapidocr returns text lines (quadrilaterals) in detection order; `layout.reading_order`
puts them in reading order (columns, rows) and its word boxes (`return_word_box=True`)
give each word its own box. Lines whose word boxes cannot be matched to the line text get
boxes spread over the line in proportion to the characters.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image

from tools.ocr.base import OcrBackend, OcrError, OcrResult, empty_result
from tools.ocr.layout import core_box, reading_order, split_line

__all__ = ["RapidOcrBackend", "MODEL_FILES"]

MODEL_FILES = {  # rapidocr config key -> file shipped in rapidocr/models
    "Det.model_path": "PP-OCRv6_det_small.onnx",
    "Rec.model_path": "PP-OCRv6_rec_small.onnx",
    "Cls.model_path": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
}
INSTALL = "pip install rapidocr==3.10.0 onnxruntime"


def _model_dir() -> Path | None:
    spec = importlib.util.find_spec("rapidocr")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "models"


class RapidOcrBackend(OcrBackend):
    """PP-OCRv6 via rapidocr; CPU, ~2-10 s per A4 page at 150-200 dpi on two cores.

    Args:
        threads: onnxruntime intra-op threads (0 = onnxruntime's default, all cores). Parallel
            ingest workers use 1 each so that they do not fight over the cores.
        min_score: lines recognised with a lower score are dropped (rapidocr's default 0.5).
    """

    name = "rapidocr"
    install_hint = INSTALL

    def __init__(self, threads: int = 0, min_score: float = 0.5):
        reason = self.unavailable_reason()
        if reason:
            from tools.errors import MissingDependencyError

            raise MissingDependencyError(reason)
        import logging

        from rapidocr import RapidOCR

        models = _model_dir()
        params = {key: str(models / file) for key, file in MODEL_FILES.items()}
        params.update({"Global.log_level": "error", "Global.use_cls": False, "Global.text_score": float(min_score)})
        if threads > 0:
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = int(threads)
            params["EngineConfig.onnxruntime.inter_op_num_threads"] = 1
        self._engine = RapidOCR(params=params)
        logging.getLogger("RapidOCR").setLevel(logging.ERROR)  # "detection result is empty" on blank pages is not news

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if importlib.util.find_spec("rapidocr") is None:
            return f"rapidocr is not installed; install it with: {INSTALL}"
        if importlib.util.find_spec("onnxruntime") is None:
            return f"onnxruntime (needed by rapidocr) is not installed; install it with: {INSTALL}"
        models = _model_dir()
        missing = [f for f in MODEL_FILES.values() if models is None or not (models / f).is_file()]
        if missing:
            return (f"rapidocr's wheel lacks its models ({', '.join(missing)}); reinstall it with: {INSTALL} "
                    "(the 3.10 wheel ships PP-OCRv6; Dossier never downloads models)")
        return None

    def read(self, image: Image.Image) -> OcrResult:
        rgb = np.asarray(image.convert("RGB"))
        height, width = rgb.shape[:2]
        if width < 4 or height < 4:
            return empty_result(self.name, width, height)
        try:
            out = self._engine(rgb[:, :, ::-1].copy(), return_word_box=True)  # rapidocr expects BGR arrays
        except Exception as err:  # onnxruntime and cv2 raise many types
            raise OcrError(f"rapidocr failed on a {width}×{height} image: {type(err).__name__}: {err}") from None
        texts = list(getattr(out, "txts", None) or ())
        if not texts:
            return empty_result(self.name, width, height)
        quads = np.asarray(out.boxes, np.float32).reshape(-1, 4, 2)
        scores = [float(s) for s in out.scores]
        word_lists = _match_word_boxes(texts, list(getattr(out, "word_results", None) or ()))
        cores = np.stack([core_box(q) for q in quads])
        words: list[str] = []
        boxes: list[np.ndarray] = []
        confidences: list[float] = []
        lines: list[tuple[int, int, int]] = []
        for block_no, block in enumerate(reading_order(cores)):
            for line_no, row in enumerate(block):
                word_no = 0
                for i in row:
                    line_box = np.array([quads[i, :, 0].min(), quads[i, :, 1].min(),
                                         quads[i, :, 0].max(), quads[i, :, 1].max()], np.float32)
                    pieces = word_lists[i] or [(w, b, scores[i]) for w, b in split_line(texts[i], line_box)]
                    for text, box, score in pieces:
                        words.append(text)
                        boxes.append(box)
                        confidences.append(score)
                        lines.append((block_no, line_no, word_no))
                        word_no += 1
        if not words:
            return empty_result(self.name, width, height)
        box_array = np.clip(np.stack(boxes).astype(np.float32), 0, [width, height, width, height]).astype(np.float32)
        return OcrResult(self.name, width, height, words, box_array,
                         np.clip(np.array(confidences, np.float32), 0.0, 1.0), np.array(lines, np.int32))


def _match_word_boxes(texts: list[str], word_results: list) -> list[list[tuple[str, np.ndarray, float]] | None]:
    """Pair each line with its word boxes.

    rapidocr drops empty word lists when filtering by score, so `word_results` can be shorter
    than `texts`; a word list belongs to a line only when its words spell the line's text.
    """
    out: list[list[tuple[str, np.ndarray, float]] | None] = []
    j = 0
    for text in texts:
        target = "".join(text.split())
        matched = None
        if j < len(word_results):
            items = [w for w in word_results[j] if w and w[2] is not None]
            if items and "".join("".join(str(w[0]).split()) for w in items) == target:
                matched = []
                for word, score, quad in items:
                    q = np.asarray(quad, np.float32).reshape(-1, 2)
                    box = np.array([q[:, 0].min(), q[:, 1].min(), q[:, 0].max(), q[:, 1].max()], np.float32)
                    for piece, piece_box in split_line(str(word), box):  # a "word" may hold several
                        matched.append((piece, piece_box, float(score)))
                j += 1
        out.append(matched)
    return out
