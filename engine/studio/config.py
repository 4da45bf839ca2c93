"""Settings of a studio server: what it serves, where annotators' runs go, and its safety limits.

The search settings (`k`, `search_mode`, `page_chars`, `rerank`, `late_model`) mean exactly what
they mean for `dossier run` (engine/agents/settings.py): the studio searches through the same
`AgentEnv.search` call as the BM25 agent, so a person sees the same top-k for the same query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.web.guard import check_exposure
from tools.errors import DossierError

__all__ = ["StudioConfig"]

@dataclass(slots=True)
class StudioConfig:
    corpus: Path  # corpus directory (ingested and indexed)
    questions: Path  # canonical question file (JSONL) the annotators answer, in file order
    out: Path  # studio directory: one run directory per annotator, OUT/<annotator>/
    host: str = "127.0.0.1"  # interface to bind; anything but loopback needs `token`
    port: int = 8300  # TCP port (0: any free port, the bound one is printed)
    token: str | None = None  # shared secret every request must carry; required off loopback
    k: int = 5  # pages per search: the agents' top-k (MADQA: 5)
    search_mode: str = "boolean"  # "boolean": MADQA's query language; "bag": free text, words OR-ed
    page_chars: int = 1500  # characters of page text the agents' tool cuts per hit (kept for parity)
    rerank: str = "none"  # "none", or "late": the agents' late-interaction rerank of BM25 candidates
    late_model: str = "minilm"  # late-interaction model for rerank="late"
    dpi: int = 150  # resolution of page images in the viewer, dots per inch
    max_pixels: int = 4_000_000  # pixel cap per page image (width x height)
    max_body_bytes: int = 65_536  # largest request body accepted, bytes (a 413 beyond it)
    oracle: bool = False  # MADQA's human oracle condition: each question's gold evidence pages are shown first
    head_timeout_s: float = 10.0  # seconds a client has to send a request's headers; the connection closes past it
    body_timeout_s: float = 60.0  # then seconds it has to send the body (the connection closes past it)
    limit_concurrency: int = 512  # open connections served at once; beyond it new requests get a 503

    def __post_init__(self):
        self.corpus, self.questions, self.out = Path(self.corpus), Path(self.questions), Path(self.out)
        if not (self.corpus / "dossier.sqlite").is_file():
            raise DossierError(f"{self.corpus} is not a corpus; build one with `dossier ingest PDFS --corpus "
                               f"{self.corpus}` and `dossier index --corpus {self.corpus}`")
        if not self.questions.is_file():
            raise DossierError(f"{self.questions}: no such question file (a canonical JSONL, e.g. from "
                               "`dossier sample` or `dossier import`)")
        if not 0 <= self.port <= 65535:
            raise DossierError(f"port {self.port} is out of range (0..65535; 0 picks a free port)")
        if self.token is not None and not re.fullmatch(r"[A-Za-z0-9._~-]{8,200}", self.token):
            raise DossierError("the token must be 8-200 characters of A-Z a-z 0-9 . _ ~ - (it travels in a URL "
                               "and a cookie), e.g. from `openssl rand -hex 16`")
        refusal = check_exposure(self.host, self.token, app="the studio", flag="--token SECRET", how="carry it")
        if refusal:
            raise DossierError(refusal)
        if self.k < 1:
            raise DossierError(f"k must be at least 1 (got {self.k})")
        if self.search_mode not in ("boolean", "bag"):
            raise DossierError(f"search mode must be 'boolean' or 'bag' (got {self.search_mode!r})")
        if self.rerank not in ("none", "late"):
            raise DossierError(f"rerank must be 'none' or 'late' (got {self.rerank!r})")
        if not 1024 <= self.max_body_bytes <= 16 * 1024 * 1024:
            raise DossierError(f"max_body_bytes {self.max_body_bytes} is out of range (1 KiB .. 16 MiB)")
        for name in ("head_timeout_s", "body_timeout_s"):
            if getattr(self, name) <= 0:
                raise DossierError(f"{name} must be > 0 seconds (got {getattr(self, name)})")
        if self.limit_concurrency < 1:
            raise DossierError(f"limit_concurrency must be at least 1 (got {self.limit_concurrency})")

    def search_settings(self) -> dict:
        """The settings recorded in each annotator's run.json (those of `dossier run` that apply to a person)."""
        return {"k": self.k, "search_mode": self.search_mode, "page_chars": self.page_chars, "rerank": self.rerank,
                "late_model": self.late_model, "render_dpi": self.dpi, "render_max_pixels": self.max_pixels,
                # an oracle run never resumes as a search-only one, nor the other way round
                **({"condition": "oracle"} if self.oracle else {})}
