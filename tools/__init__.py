"""What an agent can call: the corpus store, PDF ingestion, search, OCR and page tools."""

from tools.errors import DossierError, MissingDependencyError

__all__ = ["DossierError", "MissingDependencyError"]
