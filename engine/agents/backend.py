"""How the rollout runner talks to a model: Dossier's engine, or a scripted policy for tests.

Both keep one conversation per episode and answer `step()` with the turns that finished:

    handle = backend.open()
    backend.append(handle, [("system", ...), ("user", ...)])
    ticket = backend.submit(handle, turn, seed=...)
    for ticket, output in backend.step(): ...

`EngineBackend` keeps each episode's KV cache in its engine session across turns, so a
turn prefills only the newly appended messages; `ScriptedBackend` replays a function of
(question id, step, messages) and lets tests prove the loop semantics without a model.
Both can `replay` a turn recorded by an earlier, interrupted run (engine/agents/runner.py), and
`fingerprint` the conversation a turn follows, so a recorded turn is replayed only after the same
conversation.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.agents.protocol import tool_call_schema

__all__ = ["ModelOutput", "EngineBackend", "ScriptedBackend", "FirstTurnBackend", "EnginePair", "engine_backend"]


@dataclass(slots=True)
class ModelOutput:
    text: str  # the generated turn
    tokens: dict  # {"prefilled", "cached", "generated"} for this turn
    model_s: float  # seconds from submission to the last token
    error: str | None = None  # the engine could not run the turn
    token_ids: list[int] | None = None  # the generated ids (kept so a resumed run can replay the turn exactly)
    replayed: bool = False  # taken from turns.jsonl on resume, not generated in this run


class EngineBackend:
    """Episodes as engine sessions; every turn constrained to the tool-call schema when `structured`.

    Args:
        engine: an `engine.Engine`.
        max_new_tokens: tokens per turn.
        structured: enforce the JSON schema of the turn (xgrammar).
        documents: document ids the citation schema admits (None: any string).
        temperature: 0 for greedy.
    """

    def __init__(self, engine, max_new_tokens: int, structured: bool = True, documents: list[str] | None = None,
                 temperature: float = 0.0):
        self.engine = engine
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.schemas = {flag: tool_call_schema(flag, documents) for flag in (True, False)} if structured else None
        self.processor = engine.processor
        self.max_positions = engine.max_context  # the model's context, the KV pool's or max_model_len: one place

    def open(self, qid: str = ""):
        return self.engine.open_session()

    def close(self, session) -> None:
        session.close()

    def fork(self, session, qid: str = ""):
        """A new conversation continuing `session`'s so far (its KV shared through the prefix cache)."""
        return session.fork()

    def fits(self, session, messages: list[tuple[str, str]], max_new_tokens: int | None = None) -> bool:
        """Would appending these messages and generating a full turn stay within the context?"""
        first = session.num_tokens == 0
        extra = sum(len(self.processor.render_message(role, content, first=first and i == 0).token_ids)
                    for i, (role, content) in enumerate(messages))
        extra += len(self.processor.generation_prompt().token_ids) + (max_new_tokens or self.max_new_tokens) + 8  # + closing
        return session.num_tokens + extra <= self.max_positions

    def append(self, session, messages: list[tuple[str, str]]) -> list[int]:
        """Append the messages and open the assistant turn; returns each message's token count."""
        counts = [len(session.append_message(role, content)) for role, content in messages]
        session.append_generation_prompt()
        return counts

    def submit(self, session, turn, seed: int):
        """Start the model call of `turn` (an `actions.Turn`): its own schema, else the tool-call schema."""
        from engine.core.sampling_params import SamplingParams

        schema = turn.schema if turn.schema is not None else (self.schemas[turn.allow_search] if self.schemas else None)
        own = getattr(turn, "temperature", None)  # a retry may sample; a turn-like object without the field: the run's
        temperature = self.temperature if own is None else own
        params = SamplingParams(temperature=temperature, seed=seed, json_schema=schema,
                                max_new_tokens=turn.max_new_tokens or self.max_new_tokens)
        return self.engine.submit(session, params)

    def fingerprint(self, session) -> str:
        """A digest of the session's tokens so far, and of its images' contents (an image's placeholder tokens
        do not change with its pixels): a recorded turn is replayed only after the same conversation."""
        return session.fingerprint()

    def replay(self, session, record: dict) -> bool:
        """Append a recorded turn's generated ids to the session opened for it, as if generated now.

        False when the record has no ids (the turn is then generated again).
        """
        token_ids = record.get("token_ids")
        if not isinstance(token_ids, list) or not token_ids:
            return False
        session.append_finished_turn([int(t) for t in token_ids])
        return True

    def has_pending(self) -> bool:
        return self.engine.has_pending()

    def step(self) -> list[tuple[object, ModelOutput]]:
        out = []
        for request in sorted(self.engine.step(), key=lambda r: r.request_id):
            counters = request.counters
            tokens = {"prefilled": counters.tokens_prefilled, "cached": counters.tokens_cached,
                      "generated": counters.tokens_generated, "history": counters.history_tokens,
                      "history_cached": counters.history_tokens_cached}
            seconds = (request.finished_at or time.perf_counter()) - request.submitted_at
            error = request.error if request.finish_reason is not None and request.finish_reason.value == "error" else None
            if request.finish_reason is not None and request.finish_reason.value == "length":
                tokens["cut_by_turn_cap"] = True  # the turn cap (--max-turn-tokens) ended it: a call may be cut mid-way
            out.append((request, ModelOutput(request.text, tokens, seconds, error, list(request.output_token_ids))))
        return out

    def stats(self) -> dict:
        return self.engine.stats()

    def live_tokens(self) -> tuple[int, int]:
        """(prefilled, generated) tokens the engine has run so far, turns still in flight included."""
        counters = self.engine.counters
        return counters.tokens_prefilled, counters.tokens_generated


def engine_backend(model: str, config, settings, env):
    """Load the engine a run uses and wrap it for the runner (a local run and each Ray worker alike).

    Args:
        model: 'default', a local HF directory or a .gguf file.
        config: the `EngineConfig` (a run's `RunSpec.engine`).
        settings: the run's `AgentSettings` ("auto" fields resolved here for this model).
        env: the run's `AgentEnv` (None without a corpus).

    Returns:
        (engine, resolved settings, EngineBackend); with an adapter and `settings.adapter_turns == "first"`,
        (EnginePair, resolved settings, FirstTurnBackend): two engines, the adapter on first turns only.
    """
    from dataclasses import replace

    from engine.core.llm_engine import Engine

    first_only = config.lora is not None and getattr(settings, "adapter_turns", "all") == "first"
    engine = Engine.from_pretrained(model, replace(config, lora=None) if first_only else config)
    settings = settings.resolved(vision=getattr(engine.adapter, "vision", None) is not None)
    documents = env.documents if env is not None and settings.cite_known_documents else None
    wrap = lambda e: EngineBackend(e, settings.max_new_tokens, settings.structured, documents, settings.temperature)  # noqa: E731
    if not first_only:
        return engine, settings, wrap(engine)
    tuned = Engine.from_pretrained(model, config)  # a second copy of the weights, the adapter merged into it
    return EnginePair(engine, tuned), settings, FirstTurnBackend(wrap(engine), wrap(tuned))


@dataclass(slots=True, eq=False)
class _Routed:
    """One conversation of a `FirstTurnBackend`: the base model's session holds all of it; the tuned model's
    session holds it until its first turn is generated, then is closed."""

    base: object
    first: object | None


class FirstTurnBackend:
    """An adapter on each episode's first turn only (`--adapter-turns first`), the base model on the rest.

    A query-formulation adapter (`dossier train queries`) learns an episode's first turn; merged into the one
    model it also writes every later query and the answer. Here two engines run side by side: the tuned one
    (adapter merged) generates each conversation's first turn, and its tokens join the base engine's session,
    which prefills them with the rest of the history at the second turn (that recompute is counted in the
    engine's history tokens, not hidden). Messages are appended to both sessions until the first turn is done.
    """

    def __init__(self, base: EngineBackend, tuned: EngineBackend):
        self.base, self.tuned = base, tuned
        self.processor = base.processor
        self.max_positions = base.max_positions
        self._first: dict[object, _Routed] = {}  # the tuned engine's requests in flight -> their conversation

    def open(self, qid: str = "") -> _Routed:
        return _Routed(self.base.open(qid), self.tuned.open(qid))

    def close(self, routed: _Routed) -> None:
        self.base.close(routed.base)
        self._drop_first(routed)

    def _drop_first(self, routed: _Routed) -> None:
        if routed.first is not None:
            self.tuned.close(routed.first)
            routed.first = None

    def fork(self, routed: _Routed, qid: str = "") -> _Routed:
        return _Routed(self.base.fork(routed.base, qid),
                       self.tuned.fork(routed.first, qid) if routed.first is not None else None)

    def fits(self, routed: _Routed, messages, max_new_tokens: int | None = None) -> bool:
        return self.base.fits(routed.base, messages, max_new_tokens)

    def append(self, routed: _Routed, messages) -> list[int]:
        counts = self.base.append(routed.base, messages)
        if routed.first is not None:
            self.tuned.append(routed.first, messages)
        return counts

    def submit(self, routed: _Routed, turn, seed: int):
        if routed.first is None:
            return self.base.submit(routed.base, turn, seed)
        request = self.tuned.submit(routed.first, turn, seed)
        self._first[request] = routed
        return request

    def fingerprint(self, routed: _Routed) -> str:
        return self.base.fingerprint(routed.base)  # the base session has every token, the first turn's included

    def replay(self, routed: _Routed, record: dict) -> bool:
        replayed = self.base.replay(routed.base, record)
        if replayed:
            self._drop_first(routed)
        return replayed

    def has_pending(self) -> bool:
        return self.tuned.has_pending() or self.base.has_pending()

    def step(self) -> list[tuple[object, ModelOutput]]:
        out = []
        if self.tuned.has_pending():
            for request, output in self.tuned.step():
                routed = self._first.pop(request)
                # the first turn's tokens continue the conversation on the base model (none: it stays here)
                if output.error is None and self.base.replay(routed.base, {"token_ids": output.token_ids}):
                    self._drop_first(routed)
                out.append((request, output))
        if self.base.has_pending():
            out += self.base.step()
        return out

    def live_tokens(self) -> tuple[int, int]:
        """Both engines' (prefilled, generated) tokens so far, turns in flight included."""
        (a, b), (c, d) = self.base.live_tokens(), self.tuned.live_tokens()
        return a + c, b + d


class EnginePair:
    """The base and tuned engines of a `FirstTurnBackend`, reported as one: counters summed, the tuned
    engine's own under "first_turns"."""

    def __init__(self, base, tuned):
        self.base, self.tuned = base, tuned

    def __getattr__(self, name):  # anything else (an agent's report reads the engine) is the base engine's
        return getattr(self.base, name)

    def stats(self) -> dict:
        from engine.core.counters import Counters

        ours, theirs = self.base.stats(), self.tuned.stats()
        total = Counters(**{k: v for k, v in ours["counters"].items() if k != "cache_reuse_fraction"})
        total.add(Counters(**{k: v for k, v in theirs["counters"].items() if k != "cache_reuse_fraction"}))
        return ours | {"counters": total.as_dict(), "first_turns": theirs["counters"]}


@dataclass
class _Conversation:
    qid: str
    messages: list[tuple[str, str]] = field(default_factory=list)
    turns: int = 0


class ScriptedBackend:
    """A policy function instead of a model: `policy(question_id, turn, messages) -> text`.

    Every submitted turn finishes at the next `step()`. Tokens are counted as characters so
    trajectories have plausible, checkable numbers.
    """

    def __init__(self, policy: Callable[[str, int, list[tuple[str, str]]], str], context_chars: int = 10**9,
                 max_new_tokens: int | None = None):
        self.policy = policy
        self.context_chars = context_chars
        self.max_new_tokens = max_new_tokens  # a turn cap in characters (standing in for tokens); None: no cut
        self._queue: list[tuple[object, _Conversation, object]] = []
        self._ticket = 0
        self.opened = 0
        self.closed = 0
        self.submitted: list[tuple[str, object]] = []  # (question id, Turn) of every model call, in order

    def open(self, qid: str = "") -> _Conversation:
        self.opened += 1
        return _Conversation(qid)

    def close(self, conversation) -> None:
        self.closed += 1

    def fork(self, conversation, qid: str = "") -> _Conversation:
        self.opened += 1
        return _Conversation(qid or conversation.qid, list(conversation.messages), conversation.turns)

    def fits(self, conversation, messages, max_new_tokens: int | None = None) -> bool:
        used = sum(len(c) for _, c in conversation.messages) + sum(len(c) for _, c in messages)
        return used <= self.context_chars

    def append(self, conversation, messages) -> list[int]:
        conversation.messages.extend(messages)
        return [len(content) for _, content in messages]  # characters stand in for tokens

    def submit(self, conversation, turn, seed: int):
        self._ticket += 1
        self.submitted.append((conversation.qid, turn))
        ticket = ("ticket", self._ticket)
        self._queue.append((ticket, conversation, turn))
        return ticket

    def fingerprint(self, conversation) -> str:
        """A digest of the conversation's messages so far."""
        return hashlib.blake2b(json.dumps(conversation.messages, default=_image_digest).encode(), digest_size=12).hexdigest()

    def replay(self, conversation, record: dict) -> bool:
        """A recorded turn's text joins the conversation as if the policy had written it now."""
        conversation.turns += 1
        conversation.messages.append(("assistant", str(record.get("text", ""))))
        return True

    def has_pending(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[tuple[object, ModelOutput]]:
        queue, self._queue = self._queue, []
        out = []
        for ticket, conv, turn in queue:
            conv.turns += 1
            text = self.policy(conv.qid, conv.turns, list(conv.messages))
            cap = (getattr(turn, "max_new_tokens", None) or self.max_new_tokens) if self.max_new_tokens else None
            cut = cap is not None and len(text) > cap
            text = text[:cap] if cut else text
            conv.messages.append(("assistant", text))
            history = sum(len(c) for _, c in conv.messages[:-1])
            tokens = {"prefilled": history, "cached": 0, "generated": len(text)} | ({"cut_by_turn_cap": True} if cut else {})
            out.append((ticket, ModelOutput(text, tokens, 0.0)))
        return out

    def stats(self) -> dict:
        return {"opened": self.opened, "closed": self.closed}


def _image_digest(part) -> str:
    """A page image in a message stands in the fingerprint for a digest of its pixels."""
    if hasattr(part, "tobytes") and hasattr(part, "size"):  # a PIL image
        pixels = hashlib.blake2b(part.tobytes(), digest_size=12).hexdigest()
        return f"image {part.mode} {part.size[0]}x{part.size[1]} {pixels}"
    raise TypeError(f"a message part of type {type(part).__name__} cannot be fingerprinted")
