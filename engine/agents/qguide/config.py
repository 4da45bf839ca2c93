"""What one Q-Guide episode offers the model: its tools (with their argument schemas narrowed to the
document in hand), its turn schemas, and the run's budget settings parsed from AgentSettings.

`--tools` picks a subset of the five recovery tools (the leave-one-out ablation of Appendix B):
names or their short forms text, visual, spatial, structure, lookup. "auto" offers all five to a
vision model and leaves visual_detail out for a text-only one (its result is pixels only).
Collection questions (no `document` field: MADQA, FinanceBench) also get BM25 `search`.

Q-Guide's own settings beyond AgentSettings' (`OPTIONS`, read with `option`): what the limit
turn does (`at_limit`), the gate chosen from a reliability floor (`gate = "auto"`, `rho_min`,
`calibration`), and how a long named document is read (`longdoc`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from engine.agents.protocol import search_spec
from engine.agents.qguide.evidence import SEARCH
from engine.agents.qguide.protocol import LEVELS, round_schema, submit_schema
from tools.errors import DossierError
from tools.perception import PERCEPTION_TOOLS
from tools.schema import ToolSpec

__all__ = ["TOOL_NAMES", "AT_LIMIT", "LONGDOC", "PAGE_TEXT", "OPTIONS", "option", "parse_tools", "parse_sweep",
           "page_text_withheld", "check_settings", "Setup", "setup_for"]

TOOL_NAMES = tuple(spec.name for spec in PERCEPTION_TOOLS)  # the paper's five, in its order
AT_LIMIT = ("unknown", "force")  # the limit turn: Eq. 3's submit_unknown, or the forced-answer variant
LONGDOC = ("chunk", "retrieve")  # a long named document: overlapping chunks adjudicated, or its best pages retrieved
OPTIONS = {  # name -> default of the Q-Guide settings AgentSettings may not hold (read with `option`)
    "at_limit": "unknown",  # turn T_max: "unknown" (Eq. 3) or "force" (the limit turn must submit)
    "rho_min": None,  # ρ_min, a reliability in (0, 1]: with gate "auto", τ = min{ℓ : ρ(ℓ) ≥ ρ_min}
    "calibration": None,  # with gate "auto": a scored-by-gold calibration run directory (its documents disjoint)
    "gate_table": None,  # with gate "auto": the resolved τ and reliability table (filled at run start, recorded)
    "longdoc": "chunk",  # a named document longer than chunk_pages: "chunk" (Eq. 4) or "retrieve" (top pages)
    "page_text": "auto",  # a text model's first turn: "shown", "withheld" or "auto" (withheld when sweeping)
}


def option(settings, name: str):
    """A Q-Guide setting by name: the settings' own field when they have one, else its default (`OPTIONS`)."""
    return getattr(settings, name, OPTIONS[name])


_SHORT = {"text": "text_recovery", "visual": "visual_detail", "spatial": "spatial_recovery",
          "structure": "structure_recovery", "lookup": "targeted_lookup", "query": "targeted_lookup"}


PAGE_TEXT = ("auto", "shown", "withheld")  # a text model's first turn: the pages' OCR text, or only their names


def parse_tools(value: str, vision: bool) -> list[str]:
    """The perception tools offered: "auto", or a comma-separated subset of names / short names.

    Raises:
        DossierError: an unknown name, none, or visual_detail named for a text model (it returns pixels only, so
            offering it there is a blind tool: a leave-one-out row would differ from "auto" by more than one tool).
    """
    if value.strip() == "auto":
        return [name for name in TOOL_NAMES if vision or name != "visual_detail"]
    names = []
    for item in (part.strip() for part in value.split(",")):
        name = _SHORT.get(item, item)
        if name not in TOOL_NAMES:
            raise DossierError(f"unknown Q-Guide tool {item!r} in --tools {value!r}; use auto or a comma-separated "
                               f"subset of {', '.join(TOOL_NAMES)} (or text, visual, spatial, structure, lookup)")
        if name not in names:
            names.append(name)
    if not names:
        raise DossierError(f"--tools {value!r} names no tool; use auto or a subset of {', '.join(TOOL_NAMES)}")
    if not vision and "visual_detail" in names:
        raise DossierError(f"--tools {value!r} offers visual_detail to a text model, which cannot read the crops it "
                           "returns (pixels only); leave visual out, or use a vision model with --observe image")
    return names


def page_text_withheld(settings) -> bool:
    """Does a text model's first turn leave out the pages' OCR text (`page_text`, "auto": when sweeping budgets)?"""
    value = option(settings, "page_text")
    return value == "withheld" or (value == "auto" and bool(parse_sweep(settings.max_rounds_sweep)))


def parse_sweep(value: str) -> list[int]:
    """Round budgets of `--max-rounds-sweep`: "1-6", "1,2,4" or "" (no sweep)."""
    if not value.strip():
        return []
    budgets: set[int] = set()
    try:
        for part in value.split(","):
            low, _, high = part.strip().partition("-")
            budgets.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise DossierError(f"--max-rounds-sweep {value!r} is not a range like 1-6 or a list like 1,2,4") from None
    if not budgets or min(budgets) < 1:
        raise DossierError(f"--max-rounds-sweep {value!r}: budgets are whole numbers of rounds from 1")
    return sorted(budgets)


def check_settings(settings) -> None:
    """Raise a DossierError for Q-Guide settings that cannot run (called by AgentSettings)."""
    if settings.max_rounds < 1:
        raise DossierError(f"max_rounds must be at least 1 (got {settings.max_rounds})")
    if settings.gate not in (*LEVELS, "auto"):
        raise DossierError(f"gate must be one of {', '.join(LEVELS)} or auto (got {settings.gate!r})")
    if option(settings, "at_limit") not in AT_LIMIT:
        raise DossierError(f"at_limit must be one of {', '.join(AT_LIMIT)} (got {option(settings, 'at_limit')!r})")
    if option(settings, "longdoc") not in LONGDOC:
        raise DossierError(f"longdoc must be one of {', '.join(LONGDOC)} (got {option(settings, 'longdoc')!r})")
    rho_min = option(settings, "rho_min")
    if settings.gate == "auto" and (rho_min is None or option(settings, "calibration") is None):
        raise DossierError("--gate auto needs --rho-min R (a reliability in (0, 1]) and --calibration RUN_DIR "
                           "(a Q-Guide run on questions about other documents)")
    if rho_min is not None and not 0 < rho_min <= 1:
        raise DossierError(f"rho_min must be a reliability in (0, 1] (got {rho_min})")
    if settings.chunk_pages < 1 or not 0 <= settings.chunk_overlap < settings.chunk_pages:
        raise DossierError(f"need chunk_pages >= 1 and 0 <= chunk_overlap < chunk_pages "
                           f"(got {settings.chunk_pages} and {settings.chunk_overlap})")
    if option(settings, "page_text") not in PAGE_TEXT:
        raise DossierError(f"page_text must be one of {', '.join(PAGE_TEXT)} (got {option(settings, 'page_text')!r})")
    parse_tools(settings.tools, vision=getattr(settings, "observe", "auto") != "text")
    sweep = parse_sweep(settings.max_rounds_sweep)
    if sweep and max(sweep) != settings.max_rounds:
        raise DossierError(f"--max-rounds-sweep {settings.max_rounds_sweep} runs budget {max(sweep)} as the main "
                           f"line: set --max-rounds {max(sweep)} too (got {settings.max_rounds})")


def _narrow(spec: ToolSpec, documents: list[str] | None, pages: int | None) -> ToolSpec:
    """A perception spec whose `document` may only name these documents and `page` stay within `pages`."""
    params = copy.deepcopy(spec.parameters)
    props = params["properties"]
    if documents:
        props["document"] = {**props["document"], "enum": sorted(documents)}
        props["document"].pop("minLength", None)
    if pages:
        props["page"] = {**props["page"], "maximum": pages}
    return ToolSpec(spec.name, spec.description, params)


@dataclass(slots=True)
class Setup:
    """Everything a Q-Guide episode needs to know about what it may do."""

    tools: list[str]  # names offered, in order (search last when offered)
    round_schema: dict  # a free turn: perceive with those tools, or submit
    submit_schema: dict  # the forced turn
    vision: bool  # page images and crops are shown to the model
    collection: bool  # no document named: the agent searches the corpus
    document: str | None  # the document named by the question
    page_count: int | None  # its pages
    page_counts: dict[str, int]  # pages of each document a citation may name (checked when parsing a submission)
    budgets: list[int]  # T_max values whose answers are recorded (the sweep, else [max_rounds])
    at_limit: str = "unknown"  # the limit turn, turn T_max: "unknown" (Eq. 3) or "force"
    gate: str = "med"  # τ in force (low|med|high; "auto" resolved from the calibration table)
    withhold_page_text: bool = False  # a text model's first turn names the pages without their OCR text


def setup_for(question, settings, env) -> Setup:
    """The tools and schemas of one question's episode."""
    vision = settings.observe == "image"
    tools = parse_tools(settings.tools, vision)
    document = question.extra.get("document")
    page_count = None
    if document is not None:
        document = str(document)
        page_count = env.store.document(document).page_count  # a DossierError naming an unknown document
    specs = {spec.name: spec for spec in PERCEPTION_TOOLS}
    documents = [document] if document is not None else (env.documents if settings.cite_known_documents else None)
    offered = [_narrow(specs[name], documents, page_count) for name in tools]
    if document is None:
        offered.append(search_spec())
        tools = [*tools, SEARCH]
    citable = documents if settings.cite_known_documents else None
    if document is not None and citable:
        page_counts = {document: page_count}
    else:  # a collection: any document of the corpus (the schema names them only with cite_known_documents)
        page_counts = {info.id: info.page_count for info in env.store.documents()}
    budgets = parse_sweep(settings.max_rounds_sweep) or [settings.max_rounds]
    if settings.gate == "auto" and option(settings, "gate_table"):
        from engine.agents.qguide.calibrate import overlapping

        # `QGuideSettings.run_start` refused these before the model loaded; an episode built another way
        # (the runner called directly) still must not be gated by a ρ measured on its own document
        assert not overlapping(option(settings, "gate_table"), [question]), (
            f"question {question.id} is about a document of the calibration run; check the questions with "
            "calibrate.check_questions before building episodes")
    return Setup(tools, round_schema(offered, citable, page_counts), submit_schema(citable, page_counts), vision,
                 document is None, document, page_count, page_counts, budgets, option(settings, "at_limit"),
                 resolved_gate(settings), not vision and page_text_withheld(settings))


def resolved_gate(settings) -> str:
    """τ of a run: the --gate level, or for "auto" the level chosen from the calibration table at run start."""
    if settings.gate != "auto":
        return settings.gate
    table = option(settings, "gate_table")
    if not table or table.get("tau") not in LEVELS:
        raise DossierError("--gate auto was not resolved: no level reaches --rho-min in the calibration run "
                           "(see the reliability table printed at the start); lower --rho-min or use --gate high")
    return table["tau"]
