"""Surya OCR worker process: reads image paths on stdin, writes text lines as JSON on stdout.

Run by `tools/ocr/surya.py` in its own process (so a hung model server or a CUDA crash
cannot take ingest down with it) and kept alive across pages. Standalone on purpose: it
imports nothing from Dossier, so it can run under another interpreter that has surya.

Protocol, one JSON object per line:
    worker -> {"ready": true, "api": "..."}             once the models are loaded
    parent -> {"image": "/tmp/page.png"}
    worker -> {"lines": [{"text", "bbox": [x0, y0, x1, y1], "polygon": [[x, y] x4] | null,
                          "confidence", "words": [{"text", "bbox", "confidence"}] | null}]}
    worker -> {"error": "one line"}                      when loading or one image fails

surya's Python API changed between releases: 0.17 has `RecognitionPredictor(FoundationPredictor())`
called with a `DetectionPredictor`; surya 2 serves its recognition VLM through llama.cpp or vLLM
(`SuryaInferenceManager`). Both are tried; results are read through whichever attributes exist.
"""

from __future__ import annotations

import json
import re
import signal
import sys


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _load():
    from surya.detection import DetectionPredictor
    from surya.recognition import RecognitionPredictor

    try:
        from surya.inference import SuryaInferenceManager  # surya 2: VLM behind llama-server / vLLM

        return "surya2", RecognitionPredictor(SuryaInferenceManager()), DetectionPredictor()
    except ImportError:
        from surya.foundation import FoundationPredictor  # surya 0.17

        return "surya0.17", RecognitionPredictor(FoundationPredictor()), DetectionPredictor()


def _box(obj):
    bbox = getattr(obj, "bbox", None)
    return [float(v) for v in bbox] if bbox is not None else None


def _lines(result) -> list[dict]:
    out = []
    for line in getattr(result, "text_lines", None) or []:
        text = re.sub(r"<[^>]+>", "", getattr(line, "text", "") or "").strip()
        if not text:
            continue
        words = None
        if getattr(line, "words", None):
            words = [{"text": w.text, "bbox": _box(w), "confidence": float(getattr(w, "confidence", 1.0) or 0.0)}
                     for w in line.words if getattr(w, "text", "").strip()]
        polygon = getattr(line, "polygon", None)
        out.append({"text": text, "bbox": _box(line), "polygon": [[float(x), float(y)] for x, y in polygon] if polygon else None,
                    "confidence": float(getattr(line, "confidence", 1.0) or 0.0), "words": words})
    if out:
        return out
    for block in getattr(result, "blocks", None) or []:  # surya 2 full-page output: HTML blocks with boxes
        html = getattr(block, "html", None) or getattr(block, "text", "") or ""
        for part in re.split(r"<br\s*/?>|\n", html):
            text = re.sub(r"<[^>]+>", " ", part).strip()
            if text and _box(block):
                out.append({"text": " ".join(text.split()), "bbox": _box(block), "polygon": None,
                            "confidence": float(getattr(block, "confidence", 1.0) or 1.0), "words": None})
    return out


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit through atexit: surya stops its server
    try:
        api, recognizer, detector = _load()
    except Exception as err:  # report any load failure as one line, then stop
        _emit({"error": f"cannot load surya: {type(err).__name__}: {str(err)[:300]}"})
        return 1
    _emit({"ready": True, "api": api})
    from PIL import Image

    for raw in sys.stdin:
        if not raw.strip():
            continue
        try:
            request = json.loads(raw)
            with Image.open(request["image"]) as img:
                image = img.convert("RGB")
            results = recognizer([image], det_predictor=detector)
            _emit({"lines": _lines(results[0])})
        except Exception as err:  # one bad image must not end the worker
            _emit({"error": f"{type(err).__name__}: {str(err)[:300]}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
