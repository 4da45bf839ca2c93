"""What an agent can call: the corpus store, PDF ingestion, search, OCR and page tools."""

import os
import sys

from tools.errors import DossierError, MissingDependencyError

# PyMuPDF 2.0 imports its optional ONNX layout analyser (pymupdf.layout) whenever pymupdf is
# imported: about a second per process, paid again by every ingest worker. Dossier never uses
# it and text/word extraction is byte-identical without it, so keep it out unless asked for.
if "pymupdf" not in sys.modules and not os.environ.get("DOSSIER_PYMUPDF_LAYOUT"):
    sys.modules.setdefault("pymupdf.layout", None)

__all__ = ["DossierError", "MissingDependencyError"]
