"""Settings of an agent run, recorded in the run's metadata (run.json) so a run can be reproduced.

Two kinds of settings:

    RunSettings      what every agent's run has (pages per search, turn cap, sampling, ...)
    an agent's own   a dataclass in the agent's file, named on its registry line
                     (`AgentSpec(..., settings="engine.agents.bm25:Bm25Settings")`)

Each field is declared with `setting(default, help)`: the help is `dossier run --help`'s text
for its option (engine/cli/run.py builds the options from these classes, one help panel per
agent). An agent's settings class may define `check(settings)` (a staticmethod): it raises a
DossierError for values that agent cannot run, and may fill in what it derives (Q-Guide's
--max-rounds from --max-rounds-sweep). It is called only when that agent runs. It may also
define `run_start(settings, questions) -> list[str]`: `start_run` calls it once the questions
are loaded and before the model loads, and prints the lines it returns (Q-Guide's τ table); it
may raise a DossierError to refuse the questions (a calibration run's documents).

`AgentSettings`, what a run carries and run.json records, holds the RunSettings fields and
every registered agent's own fields side by side (`settings.loop`, `settings.max_rounds`), so
an episode reads its settings as plain attributes. A name two agents declare must agree on
type and default (one option serves both); otherwise importing this module fails naming them.
Settings modules stay light (no numpy, no torch): `dossier --help` imports every one of them.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields, make_dataclass, replace

from engine.agents.registry import AgentSpec, agent_spec, registered
from engine.agents.settings_fields import setting
from tools.errors import DossierError

__all__ = ["AgentSettings", "RunSettings", "setting", "setting_fields", "settings_for", "build_settings_class",
           "agent_keys"]


@dataclass(slots=True)
class RunSettings:
    """What every agent's run has."""

    agent: str = setting("bm25", "a registered agent (engine/agents/registry.py)", cli=False)
    k: int = setting(5, "Pages per search (MADQA: 5).", flags=("-k", "--k"))
    max_iterations: int = setting(10, "Model turns per episode; the last must answer (MADQA: T = 10).")
    observe: str = setting("auto", "How hits are shown: image (rendered pages, vision models), text, or auto "
                                   "(image when the model takes images).")
    page_chars: int = setting(1500, "Characters of page text shown per hit.")
    image_dpi: int = setting(100, "DPI of page images shown to vision models.")
    image_max_pixels: int = setting(1_003_520, "Pixel cap of each page image (Qwen-VL's 1280*28*28).")
    max_new_tokens: int = setting(256, "Tokens the model may generate per turn (MADQA's 256: room for the longest "
                                       "schema-valid call). A reasoning model that thinks before its call needs more; "
                                       "a call cut by the cap is answered with an observation saying so.",
                                  flags=("--max-turn-tokens", "--max-new-tokens"))
    structured: bool = setting(True, "Constrain turns to the tool-call JSON schema.")
    cite_known_documents: bool = setting(True, "the schema only admits document ids of the corpus", cli=False)
    search_mode: str = setting("boolean", "boolean (MADQA's query language) or bag (free text).")
    rerank: str = setting("none", "none, or late: rerank search hits by late interaction (needs `dossier index "
                                  "--late`).")
    late_model: str = setting("minilm", "late-interaction model (needs `dossier index --late MODEL`)", cli=False)
    message_role: str = setting("user", "role of tool observations in the chat", cli=False)
    system_prompt: str | None = setting(None, "None: the agent's built-in prompt", cli=False)
    seed: int = setting(0, "Sampling seed: each turn's seed derives from it, the question and the step (greedy "
                           "decoding ignores it).")
    temperature: float = setting(0.0, "0 = greedy (the default); above 0, sampling with --seed.")
    stop_rule: str | None = setting(None, "a learned stop rule (JSON from `dossier train stop`)", cli=False)
    adapter_turns: str = setting("all", "The turns --adapter acts on: all (merged into the one model), or first "
                                        "(each episode's first turn, the one `dossier train queries` learns; the "
                                        "other turns are the base model's, a second copy of the weights).")

    def check_run(self) -> None:
        """Raise a DossierError for values no agent can run."""
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
        if self.adapter_turns not in ("all", "first"):
            raise DossierError(f"adapter_turns must be 'all' or 'first' (got {self.adapter_turns!r})")
        if self.rerank not in ("none", "late"):
            raise DossierError(f"rerank must be 'none' or 'late' (got {self.rerank!r})")
        if self.temperature < 0:
            raise DossierError(f"temperature must be 0 (greedy) or positive (got {self.temperature})")
        if self.max_new_tokens < 16:
            raise DossierError(f"--max-turn-tokens must be at least 16 (got {self.max_new_tokens})")


def setting_fields(cls) -> list[tuple[str, type, object]]:
    """(name, resolved type, dataclass Field) of a settings class, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f) for f in fields(cls)]


def _union_fields(specs: tuple[AgentSpec, ...]) -> list[tuple[str, object, object]]:
    seen = {name: ("RunSettings", f, hint) for name, hint, f in setting_fields(RunSettings)}
    out = []
    for spec in specs:
        cls = spec.settings_class()
        if cls is None:
            continue
        for name, hint, f in setting_fields(cls):
            if name in seen:
                owner, other, other_hint = seen[name]
                if owner == "RunSettings" or (other.default, other.default_factory) != (f.default, f.default_factory) \
                        or other_hint != hint:
                    raise DossierError(f"setting {name!r} of agent {spec.name!r} clashes with {owner}'s; rename it "
                                       f"or give it the same type and default")
                continue
            seen[name] = (spec.name, f, hint)
            out.append((name, f.type, field(default=f.default, default_factory=f.default_factory,
                                            metadata=f.metadata)))
    return out


def _post_init(self) -> None:
    self.check_run()
    spec = agent_spec(self.agent)  # a DossierError naming the registered agents when unknown
    cls = spec.settings_class()
    if cls is not None and hasattr(cls, "check"):
        cls.check(self)  # what only this agent's settings must satisfy (it may fill derived values)


def _resolved(self, vision: bool):
    """These settings with `observe` decided for a model (`vision`: it takes images)."""
    observe = self.observe if self.observe != "auto" else ("image" if vision else "text")
    if observe == "image" and not vision:
        raise DossierError("observe='image' needs a vision-language model (e.g. a Qwen2.5-VL folder); "
                           "this model is text-only: use --observe text or auto")
    return replace(self, observe=observe)


def _to_json(self) -> dict:
    return asdict(self)


def build_settings_class(specs: tuple[AgentSpec, ...], name: str = "AgentSettings"):
    """The settings class of a run for these registered agents: RunSettings' fields and each agent's own."""
    cls = make_dataclass(name, _union_fields(specs), bases=(RunSettings,), slots=True,
                         namespace={"__post_init__": _post_init, "resolved": _resolved, "to_json": _to_json,
                                    "__module__": __name__})
    cls.__doc__ = "Every setting of a run: RunSettings' and each registered agent's own (see this module's docstring)."
    return cls


AgentSettings = build_settings_class(registered())


def agent_keys(agent: str) -> set[str]:
    """The settings keys that matter to `agent`'s run: RunSettings' and its own (resume compares these)."""
    cls = agent_spec(agent).settings_class()
    return {f.name for f in fields(RunSettings)} | ({f.name for f in fields(cls)} if cls else set())


def settings_for(agent: str, **values) -> AgentSettings:
    """AgentSettings for `agent`; a DossierError names a setting no registered agent has."""
    known = {f.name for f in fields(AgentSettings)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise DossierError(f"unknown setting(s) {', '.join(unknown)} for agent {agent!r}")
    return AgentSettings(agent=agent, **values)
