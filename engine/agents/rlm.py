"""The Recursive Language Model baseline (`dossier run --agent rlm`), as MADQA runs it (Appendix G.5).

The whole corpus sits in a Python variable `context`: every document's pages concatenated,
marked as in the paper ("[FILE doc]", then "[PAGE N] ... [END PAGE N]"). Each root turn the
model replies {"code": "..."} or {"final": "..."}. Code runs only through `tools/sandbox`
(a separate confined process; nothing runs in the engine's process) with `context` as a global
and `llm_query(prompt) -> str` (and `llm_query_batch(prompts) -> list[str]`): sub-calls served
by the same engine, each a child episode of one turn. What the code prints is the next
observation; code that fails is an observation naming the error, never a crash.

The sandbox is one process per run, not a live interpreter, so a sub-call is served by replay:
the program runs until its first unanswered `llm_query`, the engine answers it, and the program
runs again from the top with that answer memoised (programs over a fixed `context` are
deterministic). Each replay is recorded. Variables do not persist between turns: a turn that
needs an earlier result recomputes it (the prompt says so).

Budgets: --max-iterations root turns; --rlm-max-tokens tokens per episode, root and sub-calls
together (when spent, `llm_query` returns "[token budget exhausted]" and the next turn must give
the final answer); --rlm-max-depth: 1 (the paper's) lets the root call sub-LLMs, 0 gives it
none. Sub-calls do not recurse further (depth 2 is refused).

The answer is then extracted as the paper does ("post-processed through a structured output
extraction step, using the same underlying model"): one forced answer turn with the answer tool's
schema, citing documents and pages from the markers. The trajectory accounts root and sub-call
tokens apart (`rlm.root_tokens`, `rlm.sub_tokens`, each sub-call's prompt, answer and tokens).
The prediction's "tokens" are the root's calls (the steps'); the sub-calls' prefilled, cached and
generated counts are the trajectory's top-level `child_tokens`, which `dossier eval` adds to the
token effort measures (engine/eval/trajectories.py; runs written before it count the root alone).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from engine.agents import prompts
from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.bm25 import Episode
from engine.agents.settings_fields import setting
from engine.datasets.formats import Question
from tools.errors import DossierError

__all__ = ["RlmSettings", "RlmEpisode", "SubCall", "corpus_text", "PRELUDE"]

PENDING = "\x00RLM_PENDING "  # the line a program prints when it stops at an unanswered llm_query
EXHAUSTED = "[token budget exhausted]"
NO_SUBCALLS = "[llm_query is not available: --rlm-max-depth 0]"


@dataclass(slots=True)
class RlmSettings:
    rlm_max_tokens: int = setting(200_000, "rlm: tokens per episode, root and sub-calls together (prompt and "
                                           "generated); when spent, llm_query returns a note and the model must "
                                           "give its final answer.")
    rlm_max_depth: int = setting(1, "rlm: recursion depth of llm_query: 1 (the paper's RLM) lets the root's code "
                                    "call sub-LLMs, 0 gives it none.")
    rlm_output_chars: int = setting(2000, "rlm: characters of a program's printed output shown to the model.")
    allow_unsandboxed_code: bool = setting(False, "Run model-written code even where the kernel sandbox "
                                                  "(bubblewrap) is unavailable, with only the in-process policy "
                                                  "and rlimits; run.json records it. Without it such a machine "
                                                  "refuses the run.")

    @staticmethod
    def check(settings) -> None:
        from tools.sandbox.boundary import require_kernel_boundary

        require_kernel_boundary(settings.allow_unsandboxed_code, "the rlm agent")
        if settings.rlm_max_tokens < 1000:
            raise DossierError(f"--rlm-max-tokens must be at least 1000 (got {settings.rlm_max_tokens})")
        if settings.rlm_max_depth not in (0, 1):
            raise DossierError(f"--rlm-max-depth must be 0 or 1 (got {settings.rlm_max_depth}); sub-calls are "
                               f"plain model calls, they do not recurse further")
        if settings.rlm_output_chars < 100:
            raise DossierError(f"--rlm-output-chars must be at least 100 (got {settings.rlm_output_chars})")


PRELUDE = '''\
import json as _json
class _Pending(BaseException):
    pass
def llm_query_batch(prompts):
    prompts = [str(p) for p in prompts]
    missing = [p for p in prompts if p not in _answers]
    if missing:
        print("\\x00RLM_PENDING " + _json.dumps(missing), flush=True)
        raise _Pending()
    return [_answers[p] for p in prompts]
def llm_query(prompt):
    return llm_query_batch([prompt])[0]
try:
    exec(compile(_code, "program.py", "exec"), {"context": context, "llm_query": llm_query,
                                                 "llm_query_batch": llm_query_batch, "__name__": "__main__"})
except _Pending:
    pass
'''

SYSTEM = """\
You answer a question about a collection of documents. Their full text is in a Python variable \
`context` ({chars:,} characters, {documents} documents: {names}). Each document starts with \
"[FILE <document id>]" and each page is wrapped in "[PAGE <n>]" ... "[END PAGE <n>]".
Each turn reply with one JSON object: {{"code": "<python>"}} to run Python (you see what it prints; \
variables do not persist between turns), or {{"final": "<answer, naming the document and page>"}} \
when you know the answer. In code, llm_query(prompt) asks a language model and returns its reply \
as a string (llm_query_batch(prompts) asks several); use it on pieces of `context`, e.g. one \
document at a time. Search with Python (str.find, re) before reading pages."""

ROOT_SCHEMA = {"anyOf": [
    {"type": "object", "properties": {"code": {"type": "string", "minLength": 1, "maxLength": 1500}},
     "required": ["code"], "additionalProperties": False},
    {"type": "object", "properties": {"final": {"type": "string", "minLength": 1, "maxLength": 400}},
     "required": ["final"], "additionalProperties": False}]}
SUB_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 600}}, "required": ["answer"],
              "additionalProperties": False}
EXTRACT = ("Now give the final answer with the answer tool: the shortest answer, and as citations the document "
           "ids and page numbers (from the [FILE ...] and [PAGE n] markers) it comes from.")

_TEXTS: dict[int, str] = {}
_LOCK = threading.Lock()


def corpus_text(store) -> str:
    """The corpus linearly concatenated with the paper's file and page markers (built once per store)."""
    with _LOCK:
        if id(store) not in _TEXTS:
            parts = []
            for info in store.documents():
                parts.append(f"[FILE {info.id}]\n")
                for n in range(1, info.page_count + 1):
                    parts.append(f"[PAGE {n}]\n{store.page(info.id, n).text.strip()}\n[END PAGE {n}]\n")
                parts.append("\n")
            _TEXTS[id(store)] = "".join(parts)
        return _TEXTS[id(store)]


def _used(tokens: dict) -> int:
    return int(tokens.get("prefilled", 0)) + int(tokens.get("cached", 0)) + int(tokens.get("generated", 0))


@dataclass
class SubCall:
    """One llm_query: a child episode of one free-text turn (its answer in {"answer": ...})."""

    question: Question
    prompt: str
    answer: str = ""
    tokens: dict = field(default_factory=dict)
    iterations: int = 0

    def first_turn(self) -> Turn:
        return Turn([("user", self.prompt)], allow_search=False, schema=SUB_SCHEMA)

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float) -> Done:
        self.iterations, self.tokens = 1, dict(tokens)
        try:
            self.answer = str(json.JSONDecoder(strict=False).raw_decode(raw[raw.find("{"):])[0]["answer"])
        except (ValueError, KeyError, TypeError):
            self.answer = raw.strip()  # unconstrained or cut: the text itself is the reply
        return Done("answered")

    def force_answer(self, note: str) -> Turn:
        return Turn([("user", note)], allow_search=False, schema=SUB_SCHEMA)

    def fail(self, reason: str) -> Done:
        self.answer = f"[llm_query failed: {reason}]"
        return Done(reason)

    def to_json(self) -> dict:
        return {"prompt": self.prompt[:500], "prompt_chars": len(self.prompt), "answer": self.answer,
                "tokens": self.tokens}


@dataclass
class RlmEpisode(Episode):
    """Root turns of code or a final answer; sub-calls as child episodes; then the answer extracted."""

    retries_malformed = False  # (for the extraction turn: a malformed answer ends the episode)

    def __post_init__(self) -> None:
        self.context = corpus_text(self.env.store)
        self.answers: dict[str, str] = {}  # llm_query prompt -> reply, memoised across replays
        self.sub_calls: list[dict] = []
        self.sub_tokens = 0
        self.child_tokens = {"prefilled": 0, "cached": 0, "generated": 0}  # the sub-calls', by kind
        self.root_tokens = 0
        self.root_turns = 0
        self.final: str | None = None
        self._code: str | None = None
        self._record: dict | None = None
        self._extracting = False

    # --- budgets ---------------------------------------------------------------------------
    @property
    def tokens_left(self) -> int:
        return self.settings.rlm_max_tokens - self.root_tokens - self.sub_tokens

    def first_turn(self) -> Turn:
        names = ", ".join(self.env.documents[:20]) + (" ..." if len(self.env.documents) > 20 else "")
        system = self.settings.system_prompt or SYSTEM.format(chars=len(self.context), documents=len(self.env.documents),
                                                              names=names)
        user = prompts.format_question(self.question.question) + self._footer()
        return self._root([("system", system), ("user", user)])

    def _footer(self) -> str:
        return (f"\n\n(Turns left: {self.settings.max_iterations - self.root_turns}; tokens left: "
                f"{max(self.tokens_left, 0):,}.)")

    def _root(self, messages) -> Turn:
        self._input_delta = "\n\n".join(f"<{role}> {content}" for role, content in messages)
        return Turn(messages, allow_search=True, schema=ROOT_SCHEMA)

    def _extract(self, note: str) -> Turn:
        self._extracting = True
        text = (f"{note}\n\n" if note else "") + EXTRACT
        return self._turn([(self.settings.message_role, text)], allow_search=False)

    # --- model output ----------------------------------------------------------------------
    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        if self._extracting:
            self.root_tokens += _used(tokens)
            return super().on_output(raw, turn, tokens, model_s)
        self.root_turns += 1
        self.root_tokens += _used(tokens)
        record = {"step": self.iterations + 1, "input_delta": self._input_delta, "raw_output": raw, "tool_call": None,
                  "tool_result": None, "tokens": tokens, "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(record)
        reply = _reply(raw)
        last = self.root_turns >= self.settings.max_iterations or self.tokens_left <= 0
        if isinstance(reply, str):  # malformed
            if tokens.get("cut_by_turn_cap"):
                reply = (f"cut off by the turn cap ({turn.max_new_tokens or self.settings.max_new_tokens} tokens) "
                         f"before it was complete; write shorter code")
            record["tool_result"] = {"error": reply}
            if last:
                return self._extract("")
            return self._observe(f"Your reply was not valid ({reply}). Reply with {{\"code\": ...}} or "
                                 f"{{\"final\": ...}}.")
        if "final" in reply:
            self.final = str(reply["final"])
            record["tool_call"] = {"name": "final", "arguments": {"final": self.final}}
            return self._extract(f"Your final answer: {self.final}")
        self._code = str(reply["code"])
        record["tool_call"] = {"name": "run_python", "arguments": {"code": self._code}}
        record["tool_result"] = {"runs": []}
        self._record = record
        return ToolJob(self._run_code)

    def _observe(self, text: str) -> Turn:
        return self._root([(self.settings.message_role, text + self._footer())])

    def _run_code(self):
        from tools.sandbox import run_python

        from tools.sandbox import SandboxLimits

        limits = SandboxLimits(allow_unsandboxed=self.settings.allow_unsandboxed_code)
        return run_python(PRELUDE, inputs={"context": self.context, "_answers": self.answers, "_code": self._code},
                          limits=limits)

    def on_tool_result(self, result):
        record = self._record
        stdout = result.stdout or ""
        pending = None
        if PENDING in stdout:
            head, _, tail = stdout.partition(PENDING)
            try:
                pending = json.loads(tail.splitlines()[0])
            except (ValueError, IndexError):
                pending = None
            stdout = head
        record["tool_result"]["runs"].append({"ok": result.ok, "kind": result.kind, "error": result.error,
                                              "wall_s": round(result.wall_s, 3), "pending": len(pending or [])})
        record["timing"]["tool_s"] = round(record["timing"]["tool_s"] + result.wall_s, 4)
        if pending and result.ok:
            if self.settings.rlm_max_depth < 1 or self.tokens_left <= 0:
                note = NO_SUBCALLS if self.settings.rlm_max_depth < 1 else EXHAUSTED
                self.answers.update({p: note for p in pending})
                return ToolJob(self._run_code)
            children = [SubCall(Question(f"{self.question.id}/sub{len(self.sub_calls) + i + 1}", p[:200], [], []), p)
                        for i, p in enumerate(pending)]
            return Spawn(children)
        shown = stdout[: self.settings.rlm_output_chars]
        cut = f"\n[... {len(stdout) - len(shown):,} more characters not shown]" if len(stdout) > len(shown) else ""
        if result.ok:
            record["tool_result"] |= {"ok": True, "stdout_chars": len(stdout)}
            text = f"Output:\n{shown}{cut}" if stdout.strip() else "The code ran and printed nothing."
        else:
            record["tool_result"] |= {"ok": False, "error": result.error}
            text = f"Your code failed: {result.error}" + (f"\nOutput before it failed:\n{shown}{cut}" if shown else "")
        if self.root_turns >= self.settings.max_iterations or self.tokens_left <= 0:
            return self._extract(text)
        return self._observe(text)

    def on_children(self, children: list):
        for child in children:
            self.answers[child.prompt] = child.answer
            self.sub_tokens += _used(child.tokens)
            for key in self.child_tokens:
                self.child_tokens[key] += int(child.tokens.get(key, 0))
            self.sub_calls.append(child.to_json() | {"step": self._record["step"]})
        return ToolJob(self._run_code)

    def force_answer(self, note: str) -> Turn:
        return self._extract(note)

    # --- records ------------------------------------------------------------------------------
    def trajectory(self) -> dict:
        out = super().trajectory()
        out["rlm"] = {"root_tokens": self.root_tokens, "sub_tokens": self.sub_tokens, "sub_calls": self.sub_calls,
                      "root_turns": self.root_turns, "final_text": self.final, "context_chars": len(self.context)}
        out["child_tokens"] = dict(self.child_tokens)  # what the steps and the prediction's "tokens" leave out
        return out


def _reply(raw: str) -> dict | str:
    """The root reply as {"code": ...} or {"final": ...}; else a reason string."""
    text = raw.strip()
    if "{" not in text:
        return "no JSON object"
    try:
        obj = json.JSONDecoder(strict=False).raw_decode(text[text.find("{"):])[0]
    except json.JSONDecodeError as err:
        return f"invalid JSON: {err.msg}"
    if isinstance(obj, dict) and isinstance(obj.get("code"), str) and obj["code"].strip():
        return {"code": obj["code"]}
    if isinstance(obj, dict) and obj.get("final") not in (None, ""):
        return {"final": obj["final"]}
    return 'neither "code" nor "final"'
