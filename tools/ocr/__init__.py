"""OCR backends (rapidocr, tesseract, surya) behind one interface, and ingest's OCR step."""

from tools.ocr.accuracy import char_accuracy, edit_distance, normalize_text
from tools.ocr.base import OcrBackend, OcrError, OcrResult
from tools.ocr.pages import OcrSettings, OcrStep, PageOcr, ocr_pdf_page, render_for_ocr
from tools.ocr.registry import BACKENDS, OCR_CHOICES, backend_status, get_backend, resolve_backend
from tools.ocr.surya import SuryaConfig

__all__ = [
    "BACKENDS",
    "OCR_CHOICES",
    "OcrBackend",
    "OcrError",
    "OcrResult",
    "OcrSettings",
    "OcrStep",
    "PageOcr",
    "SuryaConfig",
    "backend_status",
    "char_accuracy",
    "edit_distance",
    "get_backend",
    "normalize_text",
    "ocr_pdf_page",
    "render_for_ocr",
    "resolve_backend",
]
