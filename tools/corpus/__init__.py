"""The corpus store and PDF ingestion."""

from tools.corpus.ingest import IngestConfig, IngestSummary, find_pdfs, ingest
from tools.corpus.metadata import metadata_schema, read_metadata_file, select_documents
from tools.corpus.pdf import PdfError, read_pdf, sha256_file, text_layer_problem
from tools.corpus.render import PageRenderer, RenderLimitError, RenderSettings, render_page
from tools.corpus.worker import WorkLimits
from tools.corpus.store import CorpusStore, DocumentInfo, IngestError, PageInfo, PageWords

__all__ = [
    "CorpusStore",
    "DocumentInfo",
    "IngestConfig",
    "IngestError",
    "IngestSummary",
    "PageInfo",
    "PageRenderer",
    "PageWords",
    "PdfError",
    "RenderLimitError",
    "RenderSettings",
    "WorkLimits",
    "find_pdfs",
    "metadata_schema",
    "read_metadata_file",
    "select_documents",
    "ingest",
    "read_pdf",
    "render_page",
    "sha256_file",
    "text_layer_problem",
]
