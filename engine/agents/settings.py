"""Settings of an agent run, recorded in the run's metadata (run.json) so a run can be reproduced."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.agents.registry import agent_spec
from tools.errors import DossierError

__all__ = ["AgentSettings", "LOOPS"]

LOOPS = ("madqa", "guided")


@dataclass(slots=True)
class AgentSettings:
    agent: str = "bm25"  # a registered agent (engine/agents/registry.py): bm25 (MADQA's search agent), rag, ...
    k: int = 5  # pages per search (MADQA: 5)
    max_iterations: int = 10  # T: model calls per episode; the last one must answer (MADQA: 10)
    observe: str = "auto"  # how hits are shown: "image" (rendered pages), "text", or "auto" (image for VL models)
    page_chars: int = 1500  # characters of page text shown per hit to text-only models
    image_dpi: int = 100  # page image resolution for vision models
    image_max_pixels: int = 1_003_520  # pixel cap per page image (Qwen-VL's 1280*28*28)
    max_new_tokens: int = 256  # tokens the model may generate per turn (room for the longest schema-valid call)
    structured: bool = True  # constrain every turn to the tool-call JSON schema (xgrammar)
    cite_known_documents: bool = True  # the schema only admits document ids of the corpus
    search_mode: str = "boolean"  # "boolean": MADQA's query language; "bag": free text, words OR-ed
    rerank: str = "none"  # "none", or "late": HEAVEN-style late-interaction rerank of the BM25 candidates
    late_model: str = "minilm"  # late-interaction model (needs `dossier index --late MODEL`)
    message_role: str = "user"  # role of tool observations in the chat ("user" suits small models)
    system_prompt: str | None = None  # None: the built-in MADQA-style guidance (engine/agents/prompts.py)
    seed: int = 0  # sampling seed; greedy decoding ignores it
    temperature: float = 0.0  # 0 = greedy
    extract_iterations: int = 4  # workflow: model turns of each per-document extraction episode (the last must answer)
    # The search agent's loop: "madqa" is MADQA's exactly (every call runs the search; nothing found says so);
    # "guided" answers a repeated identical query with what it returned before instead of re-running it, and
    # a search that found nothing with the pages each of its words is on and a shorter query that matches.
    loop: str = "madqa"
    # Q-Guide (engine/agents/qguide/)
    max_rounds: int = 3  # T_max: policy turns per episode; several tool calls in one turn are one round; the last submits
    gate: str = "med"  # τ: submissions below this confidence (low < med < high) go to verification
    tools: str = "auto"  # recovery tools offered: auto, or a comma-separated subset of the five (ablation)
    chunk_pages: int = 4  # pages per chunk of a long named document (each chunk its own episode)
    chunk_overlap: int = 1  # pages consecutive chunks share
    max_rounds_sweep: str = ""  # e.g. "1-6": also record the answer at each of these T_max (branches of one run)
    stop_rule: str | None = None  # a learned stop rule (JSON from `dossier train stop`) that forces the answer when it fires

    def __post_init__(self):
        spec = agent_spec(self.agent)  # a DossierError naming the registered agents when unknown
        if self.k < 1:
            raise DossierError(f"k must be at least 1 (got {self.k})")
        if self.max_iterations < 1:
            raise DossierError(f"max_iterations must be at least 1 (got {self.max_iterations})")
        if self.page_chars < 100:
            raise DossierError(f"page_chars must be at least 100 (got {self.page_chars})")
        if self.observe not in ("auto", "text", "image"):
            raise DossierError(f"observe must be 'auto', 'text' or 'image' (got {self.observe!r})")
        if self.search_mode not in ("boolean", "bag"):
            raise DossierError(f"search_mode must be 'boolean' or 'bag' (got {self.search_mode!r})")
        if self.rerank not in ("none", "late"):
            raise DossierError(f"rerank must be 'none' or 'late' (got {self.rerank!r})")
        if self.loop not in LOOPS:
            raise DossierError(f"loop must be one of {', '.join(LOOPS)} (got {self.loop!r})")
        if self.temperature < 0:
            raise DossierError(f"temperature must be 0 (greedy) or positive (got {self.temperature})")
        if self.extract_iterations < 1:
            raise DossierError(f"extract_iterations must be at least 1 (got {self.extract_iterations})")
        if self.max_new_tokens < 16:
            raise DossierError(f"max_new_tokens must be at least 16 (got {self.max_new_tokens})")
        spec.check_settings(self)  # what only this agent's settings must satisfy

    def resolved(self, vision: bool) -> AgentSettings:
        """These settings with `observe` decided for a model (`vision`: it takes images)."""
        from dataclasses import replace

        observe = self.observe if self.observe != "auto" else ("image" if vision else "text")
        if observe == "image" and not vision:
            raise DossierError("observe='image' needs a vision-language model (e.g. a Qwen2.5-VL folder); "
                               "this model is text-only: use --observe text or auto")
        return replace(self, observe=observe)

    def to_json(self) -> dict:
        return asdict(self)
