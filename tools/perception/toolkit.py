"""The perception toolkit and its dispatcher: any call in, one grounded observation out, never an exception.

    toolkit = PerceptionToolkit("corpus", ocr="auto", reader=engine_reader)
    obs = toolkit.call("text_recovery", {"document": "3M_2018_10K", "page": 60, "region": [0, 0.1, 1, 0.4]})
    obs.to_json()  # {"tool", "document", "page", "region", "content"} or {..., "error"}

`call` validates the arguments against the tool's spec, runs the tool, and turns every
failure — unknown tool, bad argument, unknown document, page out of range, region off the
page, OCR or reader failure, even a bug — into an observation whose `error` says what was
wrong, so one bad call costs the agent one turn, not the episode.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tools.corpus.store import CorpusStore
from tools.errors import DossierError
from tools.ocr.base import OcrBackend
from tools.perception.context import PerceptionContext, PerceptionSettings, Reader
from tools.perception.lookup import LookupRequest, prepare_lookup, targeted_lookup
from tools.perception.observation import Observation, parse_region
from tools.perception.spatial import spatial_recovery
from tools.perception.specs import PERCEPTION_TOOLS
from tools.perception.structure import structure_recovery
from tools.perception.text import text_recovery
from tools.perception.visual import visual_detail
from tools.schema import ToolRegistry

__all__ = ["PerceptionToolkit"]

log = logging.getLogger(__name__)

_TOOLS = {
    "text_recovery": text_recovery,
    "visual_detail": visual_detail,
    "spatial_recovery": spatial_recovery,
    "structure_recovery": structure_recovery,
    "targeted_lookup": targeted_lookup,
}


class PerceptionToolkit:
    """The five Q-Guide recovery tools over one corpus store.

    Args:
        store: a CorpusStore or its directory.
        ocr: OCR backend for regions without usable text ('auto', a backend name, a ready
            OcrBackend, or None to never OCR).
        reader: the model behind targeted_lookup: (question, image, context_text) -> answer.
        settings: resolutions and limits.
    """

    def __init__(self, store: CorpusStore | str | Path, *, ocr: str | OcrBackend | None = "auto",
                 reader: Reader | None = None, settings: PerceptionSettings | None = None):
        store = store if isinstance(store, CorpusStore) else CorpusStore(store)
        self.context = PerceptionContext(store, settings or PerceptionSettings(), ocr, reader)
        self.registry = ToolRegistry(PERCEPTION_TOOLS)
        assert set(self.registry.names) == set(_TOOLS)

    @property
    def specs(self) -> ToolRegistry:
        """The tools' specs: `.to_json()` for a prompt, `.call_schema()` for constrained decoding."""
        return self.registry

    def call(self, name: str, arguments: dict | None = None) -> Observation:
        """Run one tool call; failures become an observation with `error` set."""
        return self._guarded(name, arguments, lambda checked: _TOOLS[name](self.context, **checked))

    def prepare_lookup(self, arguments: dict | None) -> LookupRequest | Observation:
        """A targeted_lookup's evidence for a reader the caller runs itself (see `LookupRequest`);
        a bad call gives the error observation instead, as `call` would."""
        return self._guarded("targeted_lookup", arguments, lambda checked: prepare_lookup(self.context, **checked))

    def _guarded(self, name: str, arguments, run):
        arguments = {} if arguments is None else arguments
        document, page, region = _echo(arguments)
        try:
            if isinstance(arguments, dict) and arguments.get("region") is not None:
                parse_region(arguments["region"])  # its message explains regions better than the schema's
            return run(self.registry.validate(name, arguments))
        except DossierError as err:
            return Observation(str(name), document, page, region, None, error=str(err))
        except Exception as err:  # a tool bug must not end the episode; the log keeps the traceback
            log.exception("perception tool %r failed on %r", name, arguments)
            return Observation(str(name), document, page, region, None,
                               error=f"internal error in {name}: {type(err).__name__}: {str(err)[:200]}")

    def close(self) -> None:
        backend = self.context._backend
        if backend is not None and not isinstance(self.context.ocr, OcrBackend):
            backend.close()  # a backend we created (a caller's own backend stays open)


def _echo(arguments) -> tuple[str | None, int | None, list[float] | None]:
    """The document, page and region of a call, when they are well-formed, for the error observation."""
    if not isinstance(arguments, dict):
        return None, None, None
    document = arguments.get("document") if isinstance(arguments.get("document"), str) else None
    page = arguments.get("page")
    page = page if isinstance(page, int) and not isinstance(page, bool) else None
    try:
        region = list(parse_region(arguments.get("region")))
    except DossierError:
        region = None
    return document, page, region
