"""The studio's HTTP routes (FastAPI): the page, its JSON API, and page images.

    GET  /                                     the single-page app (engine/studio/static/)
    GET  /static/{studio.js|studio.css}        its script and style; nothing else is served from disk
    GET  /api/info                             corpus, question count, top-k, query language
    POST /api/signin {"name", "resume_code"?}  open or resume an annotator's run -> state (a new run's
                                               state carries its "resume_code", once)
    GET  /api/annotators/{slug}/state          current question, progress, searches/marks so far
    POST /api/annotators/{slug}/search         {"question_id", "query"} -> the agents' top-k
    POST /api/annotators/{slug}/view           {"question_id", "document", "page", "via"}
    POST /api/annotators/{slug}/mark           {"question_id", "document", "page", "marked"}
    POST /api/annotators/{slug}/submit         {"question_id", "action": answer|not_found|skip, "answer": [...]}
    GET  /pages/{document}/{page}.png          a rendered page (only documents and pages of the corpus)

Sign-in sets a signed cookie for the annotator (engine/studio/session.py); every
`/api/annotators/{slug}/...` request must carry the cookie of that slug (403 otherwise), and
signing in under a name whose run exists needs it too (409), so nobody acts as another annotator.
A browser without that cookie signs in with the name and the run's resume code instead (a
wrong code is 403); the code is shown once, when the run starts, and printed in the terminal.

Under `--oracle` (MADQA's human oracle condition) the state carries the question's gold
evidence pages ("oracle": {"pages": [...], "note"}), which the page shows before the search box
and opens in the viewer first (a view with via "oracle").

Every error is JSON `{"error": "..."}` with a 4xx status (403 for another annotator's paths or a
wrong resume code, 404
for anything outside the corpus, 409 for a stale tab or a name already taken, 422 for a malformed
body or a page that cannot be drawn within the render limits, 400 for text that is not valid
Unicode); an unexpected failure is a 500 with a one-line message, its traceback only in the server log.
Pages are drawn in a bounded worker process (tools/corpus/render.py): a page built to hang the
renderer answers 422 at the deadline (and at once when asked again), never a hung request.
"""

# no `from __future__ import annotations`: FastAPI reads the request models from the live annotations
import logging
from importlib.resources import files
from typing import Literal

from engine.studio.annotator import AnnotatorRun, ConflictError, annotator_slug
from engine.studio.guard import Guard
from engine.studio.service import NotFoundError, Studio
from engine.studio.trajectory import marked_pages
from tools.corpus.render import RenderLimitError
from tools.errors import DossierError, missing_dependency

__all__ = ["create_app"]


class ForbiddenError(DossierError):
    """The request acts for an annotator this browser did not sign in as (403)."""


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

log = logging.getLogger(__name__)

STATIC = {"studio.js": "text/javascript; charset=utf-8", "studio.css": "text/css; charset=utf-8"}
QUERY_HELP = [
    ["revenue 2019", "pages with both words (AND is the default)"],
    ["revenue OR income", "either word"],
    ["revenue NOT forecast", "revenue, without forecast"],
    ['"net income"', "the exact phrase; \"net income\"~3 allows 3 words between"],
    ["(revenue OR income) 2019", "grouping"],
    ["rev*  colo?r", "wildcards: * any characters, ? exactly one"],
]


def create_app(studio: Studio):
    """The ASGI app serving `studio`, wrapped in the Guard (token, Host, body limit, headers)."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import FileResponse, JSONResponse, Response
        from pydantic import BaseModel, ConfigDict, Field, model_validator
        from pydantic_core import PydanticCustomError
        from starlette.exceptions import HTTPException
    except ImportError:
        raise missing_dependency("the studio's web server (fastapi, uvicorn)", "pip install 'dossier[studio]'") from None

    class Body(BaseModel):
        model_config = ConfigDict(extra="forbid")

        @model_validator(mode="after")
        def _unicode(self):  # a lone surrogate ("\ud800" in JSON) cannot be written to the run's files
            for name, value in self:
                for text in value if isinstance(value, list) else [value]:
                    if isinstance(text, str) and not _encodable(text):
                        raise PydanticCustomError("unicode", "{field} is not valid Unicode (it holds a lone "
                                                  "surrogate such as \\ud800); send UTF-8 text", {"field": name})
            return self

    class SignIn(Body):
        name: str = Field(min_length=1, max_length=40)
        resume_code: str | None = Field(default=None, max_length=40)

    class OnQuestion(Body):
        question_id: str = Field(min_length=1, max_length=200)

    class Search(OnQuestion):
        query: str = Field(min_length=1, max_length=1000)

    class View(OnQuestion):
        document: str = Field(min_length=1, max_length=300)
        page: int = Field(ge=1, le=1_000_000)
        via: Literal["result", "next", "previous", "marked", "oracle"] = "result"

    class Mark(OnQuestion):
        document: str = Field(min_length=1, max_length=300)
        page: int = Field(ge=1, le=1_000_000)
        marked: bool

    class Submit(OnQuestion):
        action: Literal["answer", "not_found", "skip"]
        answer: list[str] = Field(default_factory=list, max_length=20)

    app = FastAPI(title="Dossier studio", docs_url=None, redoc_url=None, openapi_url=None)
    static = files("engine.studio") / "static"

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, err: NotFoundError):
        return error(404, str(err))

    @app.exception_handler(ConflictError)
    async def conflict(request: Request, err: ConflictError):
        return error(409, str(err))

    @app.exception_handler(DossierError)
    async def bad_input(request: Request, err: DossierError):
        return error(400, str(err))

    @app.exception_handler(RenderLimitError)
    async def too_complex(request: Request, err: RenderLimitError):  # a hostile or huge page, not a bad request
        return error(422, str(err))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
                             for e in err.errors()[:5])
        broken = [e for e in err.errors() if e.get("type") in ("unicode", "string_unicode")]
        if broken:  # a lone surrogate: text the run's files cannot hold, not a malformed request
            where = ".".join(str(p) for p in broken[0].get("loc", ()) if p != "body") or "body"
            return error(400, f"{where} is not valid Unicode text (it holds a lone surrogate such as \\ud800); "
                              "send UTF-8 text")
        return error(422, f"malformed request: {problems}")

    def own(request: Request, slug: str) -> AnnotatorRun:
        """The run at `slug`, if this browser signed in as that annotator; else 403 (404 when there is none)."""
        run = studio.annotator(slug)
        if not studio.sessions.holds(request.headers.get("cookie", ""), slug):
            raise ForbiddenError(f"this browser is not signed in as {run.name!r}; sign in as yourself (each "
                                  "annotator works in their own browser session)")
        return run

    @app.exception_handler(ForbiddenError)
    async def forbidden(request: Request, err: ForbiddenError):
        return error(403, str(err))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        message = "not found" if err.status_code == 404 else str(err.detail)
        return error(err.status_code, f"{message}: {request.method} {request.url.path[:200]}")

    @app.exception_handler(Exception)
    async def crashed(request: Request, err: Exception):
        log.exception("studio: %s %s failed", request.method, request.url.path)
        return error(500, f"internal error ({type(err).__name__}); the server log has the details")

    def state(run: AnnotatorRun, present: bool = True) -> dict:
        question = run.present() if present else run.current()
        body = {"annotator": run.name, "slug": run.directory.name, "progress": run.progress(), "question": None,
                "condition": "oracle" if studio.oracle_pages is not None else "search"}
        if question is None:
            return body
        if studio.oracle_pages is not None:
            pages = studio.oracle_pages.get(question.id, [])
            missing = len(question.evidence) - len(pages)
            note = ("this question has no gold evidence pages: answer it with the search" if not question.evidence
                    else f"{missing} gold page(s) of this question are not in the corpus" if missing else None)
            body["oracle"] = {"pages": [{**p.to_json(), "page_count": studio.page_counts[p.document]} for p in pages],
                              "note": note}
        events = run.question_events(question.id)
        searches = [e for e in events if e["type"] == "search"]
        views = [e for e in events if e["type"] == "view"]
        last = searches[-1]["query"] if searches else None
        body["question"] = {"id": question.id, "text": question.question,
                            "number": run.questions.index(question) + 1}
        body["searches"] = [e["query"] for e in searches]
        body["last_search"] = None if last is None else {"query": last, **_shown(studio.search(last))}
        body["marked"] = [m.to_json() for m in marked_pages(events)]
        body["viewing"] = None if not views else {"document": views[-1]["document"], "page": views[-1]["page"],
                                                  "page_count": studio.page_counts.get(views[-1]["document"])}
        return body

    def _shown(outcome) -> dict:
        return {"hits": outcome.hits, "error": outcome.error, "server_ms": round(1000 * outcome.server_s, 2)}

    @app.get("/")
    def index():
        return Response((static / "index.html").read_bytes(), media_type="text/html; charset=utf-8",
                        headers={"cache-control": "no-store"})

    @app.get("/favicon.ico")
    def favicon():
        return Response(status_code=204)  # no icon, and no 404 in the browser console

    @app.get("/static/{name}")
    def static_file(name: str):
        if name not in STATIC:
            raise NotFoundError(f"no static file {name[:80]!r}")
        return Response((static / name).read_bytes(), media_type=STATIC[name], headers={"cache-control": "no-cache"})

    @app.get("/api/info")
    def info():
        stats = studio.store.stats()
        return {"corpus": studio.config.corpus.name, "documents": stats["documents"], "pages": stats["pages"],
                "questions": len(studio.questions), "k": studio.config.k, "search_mode": studio.config.search_mode,
                "query_help": QUERY_HELP if studio.config.search_mode == "boolean" else []}

    @app.post("/api/signin")
    def sign_in(body: SignIn, request: Request):
        slug = annotator_slug(body.name)
        name = body.name.strip()
        existed = studio.has_run(slug)
        if existed and not studio.sessions.holds(request.headers.get("cookie", ""), slug):
            if not (body.resume_code or "").strip():
                raise ConflictError(f"an annotator named {name!r} (names ignore case) already has a run here; if it "
                                    "is yours, enter your resume code (shown when you first signed in; the person "
                                    "running the studio can read it in the studio's terminal), otherwise pick "
                                    "another name")
            if not studio.sessions.resume_code_matches(slug, body.resume_code):
                raise ForbiddenError(f"wrong resume code for {name!r}; enter the code you were shown when you first "
                                     "signed in (the person running the studio can read it in the studio's "
                                     "terminal), or pick another name")
        body_state = state(studio.sign_in(body.name))
        if not existed:  # shown once: the only way back in from another browser
            code = studio.sessions.resume_code(slug)
            body_state["resume_code"] = code
            if studio.announce is not None:
                studio.announce(f"new annotator {name!r} ({studio.config.out / slug}): resume code {code}")
        reply = JSONResponse(body_state)
        reply.headers["set-cookie"] = studio.sessions.cookie(slug)
        return reply

    @app.get("/api/annotators/{slug}/state")
    def get_state(slug: str, request: Request):
        return state(own(request, slug))

    @app.post("/api/annotators/{slug}/search")
    def search(slug: str, body: Search, request: Request):
        run = own(request, slug)
        run.require_current(body.question_id)  # a stale tab fails before the search runs
        outcome = studio.search(body.query)
        run.record(body.question_id, "search", query=body.query, **outcome.event)
        return {"query": body.query, **_shown(outcome)}

    @app.post("/api/annotators/{slug}/view")
    def view(slug: str, body: View, request: Request):
        run = own(request, slug)
        count = studio.check_page(body.document, body.page)
        run.record(body.question_id, "view", document=body.document, page=body.page, via=body.via)
        info = studio.store.page(body.document, body.page)
        return {"document": body.document, "page": body.page, "page_count": count,
                "width": info.width, "height": info.height}

    @app.post("/api/annotators/{slug}/mark")
    def mark(slug: str, body: Mark, request: Request):
        run = own(request, slug)
        studio.check_page(body.document, body.page)
        run.record(body.question_id, "mark", document=body.document, page=body.page, marked=body.marked)
        return {"marked": [m.to_json() for m in marked_pages(run.question_events(body.question_id))]}

    @app.post("/api/annotators/{slug}/submit")
    def submit(slug: str, body: Submit, request: Request):
        run = own(request, slug)
        answer = [part.strip() for part in body.answer if part.strip()]
        if body.action == "answer" and not answer:
            raise DossierError("an answer needs at least one non-empty value (or use \"I can't find it\" / skip)")
        if any(len(part) > 1000 for part in answer):
            raise DossierError("each answer value may have at most 1000 characters")
        run.finish(body.question_id, body.action, answer if body.action == "answer" else None)
        return state(run)

    @app.get("/pages/{document}/{page}.png")
    def page_png(document: str, page: str):
        if not page.isascii() or not page.isdigit() or len(page) > 7:
            raise NotFoundError(f"page {page[:20]!r} of {document[:80]!r} does not exist (pages are numbered from 1)")
        path = studio.page_image(document, int(page))
        return FileResponse(path, media_type="image/png", headers={"cache-control": "private, max-age=86400"})

    return Guard(app, studio.config.token, studio.config.max_body_bytes)
