"""What the studio's web routes call: the agents' search tool, page images, and annotators' runs.

    studio = Studio(StudioConfig(corpus="c", questions="q.jsonl", out="runs/human"))
    run = studio.sign_in("Ana")
    question = run.present()
    result = studio.search("revenue 2019")        # exactly AgentEnv.search: the BM25 agent's tool
    run.record(question.id, "search", **result.event)
    run.finish(question.id, "answer", ["$1,577"])

The search is the BM25 agent's own call (`AgentEnv.search(query, k)`, same query language,
same top-k, same rerank); the studio only adds a snippet with the matched words for display.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from engine.agents.env import AgentEnv
from engine.datasets.formats import Evidence, Question, load_questions
from engine.studio.annotator import AnnotatorRun, annotator_slug
from engine.studio.session import Sessions
from engine.studio.config import StudioConfig
from tools.errors import DossierError

__all__ = ["Studio", "SearchOutcome", "NotFoundError"]


class NotFoundError(DossierError):
    """A document, page or annotator that does not exist (the web layer answers 404)."""


@dataclass(slots=True)
class SearchOutcome:
    """One search: what the page shows and what the journal records."""

    hits: list[dict]  # [{"document", "page", "score", "snippet": [[text, is_match], ...]}]
    error: str | None  # why the query could not run (a syntax error with a caret), else None
    server_s: float  # seconds the search took in the server

    @property
    def event(self) -> dict:
        """The journal fields of this search (pages only, as the agents' tool_result)."""
        return {"pages": [{"document": h["document"], "page": h["page"]} for h in self.hits], "error": self.error,
                "server_s": round(self.server_s, 4)}


class Studio:
    """The studio's state: the corpus environment, the question set and the annotators' runs.

    Args:
        config: the server settings.

    Raises:
        DossierError: the corpus has no search index, or the question file has no usable
            questions or repeats an id.
    """

    def __init__(self, config: StudioConfig):
        from tools.corpus import RenderSettings

        self.config = config
        questions, errors = load_questions(config.questions)
        if not questions:
            raise DossierError(f"{config.questions} has no usable questions ({len(errors)} bad lines"
                               + (f"; first: {errors[0]}" if errors else "") + ")")
        repeated = [qid for qid, n in Counter(q.id for q in questions).items() if n > 1]
        if repeated:
            raise DossierError(f"{config.questions} repeats question id(s) {', '.join(map(repr, repeated[:5]))}; "
                               "each question needs its own id (answers are stored by id)")
        self.questions: list[Question] = questions
        self.skipped_lines = errors
        self.env = AgentEnv(config.corpus, config.page_chars, config.search_mode, config.rerank, config.late_model)
        self.store = self.env.store
        self.page_counts = {d.id: d.page_count for d in self.store.documents()}
        self.render_settings = RenderSettings(dpi=config.dpi, max_pixels=config.max_pixels)
        self._runs: dict[str, AnnotatorRun] = {}
        self._lock = threading.Lock()
        self.sessions = Sessions(config.out)  # which annotator each browser is (engine/studio/session.py)
        self.announce = None  # called with a line for the operator's terminal (a new annotator's resume code)
        # the oracle condition (MADQA's human oracle): question id -> the gold pages shown, and the
        # questions that show fewer than their gold evidence (none given, or pages not in the corpus)
        self.oracle_pages: dict[str, list[Evidence]] | None = None
        self.oracle_problems: list[str] = []
        if config.oracle:
            self.oracle_pages, self.oracle_problems = self._oracle_pages()
        vocab = self.env.searcher.index.vocab
        if len(vocab):  # the first search compiles the BM25 kernel (seconds): not on a person's first query
            self.env.search(str(vocab[len(vocab) // 2]), self.config.k)

    def _oracle_pages(self) -> tuple[dict[str, list[Evidence]], list[str]]:
        """Each question's gold pages that exist in the corpus, and one line per question showing fewer."""
        pages: dict[str, list[Evidence]] = {}
        problems = []
        for question in self.questions:
            shown = list(dict.fromkeys(e for e in question.evidence
                                       if 1 <= e.page <= self.page_counts.get(e.document, 0)))
            absent = [e for e in question.evidence if e not in shown]
            pages[question.id] = shown
            if not question.evidence:
                problems.append(f"{question.id}: no gold evidence in the question file; shown without pages")
            elif absent:
                listed = ", ".join(f"{e.document} p. {e.page}" for e in absent[:5]) + (" ..." if len(absent) > 5 else "")
                problems.append(f"{question.id}: gold page(s) not in the corpus: {listed}; "
                                + (f"shown with the other {len(shown)}" if shown else "shown without pages"))
        return pages, problems

    # -- annotators ---------------------------------------------------------------------------------
    def run_meta(self) -> dict:
        """run.json of an annotator's run (CONTRIBUTING's schema, agent "human").

        "condition" is "oracle" when the gold pages were shown (MADQA's human oracle), else "search".
        """
        return {"agent": "human", "model": "human", "questions": str(self.config.questions.resolve()),
                "corpus": str(self.config.corpus.resolve()), "settings": self.config.search_settings(),
                "seed": None, "condition": "oracle" if self.config.oracle else "search"}

    def sign_in(self, name: str) -> AnnotatorRun:
        """Open (or resume) the run of the annotator with this name.

        Raises:
            DossierError: an unusable name, or an existing run started with other settings.
        """
        slug = annotator_slug(name)
        with self._lock:
            run = self._runs.get(slug)
            if run is None:
                run = AnnotatorRun(self.config.out / slug, name.strip(), self.questions, self.run_meta(),
                                   self.oracle_pages)
                self._runs[slug] = run
            return run

    def has_run(self, slug: str) -> bool:
        """Whether an annotator with this slug has signed in (now or in an earlier session)."""
        with self._lock:
            if slug in self._runs:
                return True
        return (self.config.out / slug / "run.json").is_file()

    def annotator(self, slug: str) -> AnnotatorRun:
        """The run of a signed-in annotator (or one with a run directory from an earlier session).

        Raises:
            NotFoundError: no annotator has this slug.
        """
        with self._lock:
            run = self._runs.get(slug)
        if run is not None:
            return run
        try:
            valid = annotator_slug(slug) == slug
        except DossierError:
            valid = False
        if valid and (self.config.out / slug / "run.json").is_file():
            return self.sign_in(slug)
        raise NotFoundError(f"no annotator {slug[:60]!r} has signed in; sign in first")

    # -- the search tool and pages ---------------------------------------------------------------------
    def search(self, query: str) -> SearchOutcome:
        """The agents' search (same call, k and query language) plus a highlighted snippet per hit."""
        from tools.search.searcher import snippet_spans

        start = time.perf_counter()
        hits, error = self.env.search(query, self.config.k)
        words = self.env.query_words(query) if hits else set()
        shown = [{"document": h.document, "page": h.page, "score": round(float(h.score), 4),
                  "snippet": [[piece, match] for piece, match in
                              snippet_spans(self.store.page(h.document, h.page).text, words)]} for h in hits]
        return SearchOutcome(shown, error, time.perf_counter() - start)

    def check_page(self, document: str, page: int) -> int:
        """The page count of `document`, after checking that the page exists in the corpus.

        Raises:
            NotFoundError: the document is not in the corpus or the page is out of its range.
        """
        count = self.page_counts.get(document)
        if count is None:
            raise NotFoundError(f"document {document[:80]!r} is not in the corpus")
        if not 1 <= page <= count:
            raise NotFoundError(f"page {page} does not exist in {document!r} (it has {count} pages)")
        return count

    def page_image(self, document: str, page: int) -> Path:
        """The rendered page as a PNG file in the corpus's render cache (rendered on the first request).

        Drawing runs in a bounded worker process under `render_settings.timeout_s` (tools/corpus/render.py).

        Raises:
            NotFoundError: the document or page is not in the corpus.
            RenderLimitError: the page took longer than the render time limit (or memory limit) to draw.
        """
        self.check_page(document, page)
        return self.store.render_file(document, page, self.render_settings)
