"""Draft tokens from a sequence's own history (engine/core/speculation.py): what `propose` guesses, and that the
engine keeps only the model's own choices.

In the deterministic mode a reply with drafts must equal the reply without them token for token, with drafts
actually kept (a test where none were accepted would check nothing); a rejected draft leaves the sequence, its
KV slots and the prefix table as if it had never been tried.
"""

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.core import llm_engine
from engine.core.speculation import FORCED_MISSES, propose
from tests.engine.conftest import random_prompt, run_all


def test_propose_continues_the_latest_longest_match():
    assert propose([5, 6, 7, 8, 5, 6, 7], max_tokens=4) == [8, 5, 6, 7]
    assert propose([5, 6, 7, 8, 5, 6, 7], max_tokens=2) == [8, 5]
    # two earlier occurrences of the 3-token suffix: the later one's continuation
    assert propose([1, 2, 3, 9, 1, 2, 3, 4, 1, 2, 3], max_tokens=1) == [4]
    # the longer match wins over a more recent shorter one
    assert propose([7, 1, 2, 3, 4, 50, 9, 2, 3, 4, 60, 7, 1, 2, 3, 4], max_tokens=1, min_match=3) == [50]


def test_propose_needs_min_match_tokens():
    assert propose([1, 2, 9, 1, 2], max_tokens=3) == []  # a 2-token repeat is below MIN_MATCH
    assert propose([1, 2, 9, 1, 2], max_tokens=3, min_match=2) == [9, 1, 2]
    assert propose([1, 2, 3, 4], max_tokens=3) == []
    assert propose([], max_tokens=3) == []
    assert propose([5, 6, 7, 8, 5, 6, 7], max_tokens=0) == []


PROMPTS = [random_prompt(n, seed=5100 + i) for i, n in enumerate((12, 30, 7))]


def _engine(folder, speculative: int, deterministic: bool = True, **overrides) -> Engine:
    settings = dict(block_size=4, num_kv_blocks=512, max_num_batched_tokens=256, dtype="float32",
                    deterministic=deterministic, cpu_threads=2, speculative_tokens=speculative) | overrides
    return Engine.from_pretrained(str(folder), EngineConfig(**settings))


def _generate(engine: Engine, prompts, new: int = 24) -> list[list[int]]:
    outputs = run_all(engine, prompts, new)
    engine.block_manager.check_invariants()
    return outputs


def _oracle(monkeypatch, truths: list[list[int]], vocab: int) -> None:
    """Drafts that are the model's own continuation (from a run without drafts), with every third guess made wrong:
    a tiny random model's replies seldom repeat themselves, so n-gram guesses would rarely be tested either way."""
    def guess(token_ids, most):
        for truth in truths:
            if truth[: len(token_ids)] == list(token_ids):
                ahead = truth[len(token_ids): len(token_ids) + most]
                return [(t + 1) % vocab if (len(token_ids) + i) % 3 == 0 else t for i, t in enumerate(ahead)]
        return []

    monkeypatch.setattr(llm_engine, "propose", guess)


@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen2"])
def test_deterministic_replies_are_the_same_with_drafts(family, request, monkeypatch):
    folder = request.getfixturevalue(family)[0]
    plain = _generate(_engine(folder, 0), PROMPTS)
    engine = _engine(folder, 8)
    _oracle(monkeypatch, [p + out for p, out in zip(PROMPTS, plain)], engine.adapter.shape.vocab_size)
    assert _generate(engine, PROMPTS) == plain
    counters = engine.counters
    assert counters.draft_tokens_accepted > 0, "no draft was kept: the comparison checked nothing"
    assert counters.draft_tokens > counters.draft_tokens_accepted, "no draft was rejected: rollback not exercised"
    assert counters.tokens_generated == sum(len(reply) for reply in plain)
    assert counters.forward_steps < 24  # fewer steps than one per token of the longest reply


def test_a_rejected_draft_leaves_no_trace(tiny_llama, monkeypatch):
    """A second turn after a drafted reply, then a new session with the same history reading it from cached blocks:
    every reply, the sequence and its positions equal an engine's that never drafted."""
    folder = tiny_llama[0]
    follow_up = random_prompt(9, seed=5103)

    def turns(engine):
        session = engine.open_session()
        session.append(PROMPTS[0])
        first = engine.submit(session, SamplingParams(max_new_tokens=20, ignore_eos=True))
        engine.run_until_idle()
        session.append(follow_up)
        second = engine.submit(session, SamplingParams(max_new_tokens=20, ignore_eos=True))
        engine.run_until_idle()
        other = engine.open_session()  # the same history: its full blocks come from the prefix cache
        other.append(list(session.seq.token_ids))
        third = engine.submit(other, SamplingParams(max_new_tokens=6, ignore_eos=True))
        engine.run_until_idle()
        engine.block_manager.check_invariants()
        return [first.output_token_ids, second.output_token_ids, third.output_token_ids], session.seq, other

    without, plain_seq, _ = turns(_engine(folder, 0))
    whole = PROMPTS[0] + without[0] + follow_up + without[1]
    engine = _engine(folder, 8)
    _oracle(monkeypatch, [whole, whole + without[2]], engine.adapter.shape.vocab_size)
    with_drafts, seq, other = turns(engine)
    assert with_drafts == without
    assert seq.token_ids == plain_seq.token_ids and seq.next_position == plain_seq.next_position
    assert (seq.positions == plain_seq.positions).all()
    assert engine.counters.draft_tokens > engine.counters.draft_tokens_accepted > 0
    assert other.counters.tokens_cached >= len(whole) // 4 * 4 - 4  # the history was shared, not recomputed


def test_the_engine_guesses_with_propose(tiny_llama):
    """The engine's own drafter: `propose` over the request's sequence, positions that continue it, and a count."""
    engine = _engine(tiny_llama[0], 8)
    session = engine.open_session()
    session.append(PROMPTS[0] * 3)
    request = engine.submit(session, SamplingParams(max_new_tokens=8, ignore_eos=True))
    tokens, positions, next_position = engine._drafts(request, 4)
    assert tokens == PROMPTS[0][:4]  # what followed the last earlier occurrence of the sequence's last tokens
    assert list(positions) == [36, 37, 38, 39] and next_position == 40
    assert engine.counters.draft_tokens == 4
    engine.run_until_idle()
    assert engine.counters.draft_tokens >= 4


def test_sampled_requests_and_zero_draft_nothing(tiny_llama):
    folder = tiny_llama[0]
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256, dtype="float32",
                                                               cpu_threads=2, speculative_tokens=8))
    session = engine.open_session()
    session.append(PROMPTS[0] * 3)
    engine.submit(session, SamplingParams(max_new_tokens=20, temperature=0.8, seed=3, ignore_eos=True))
    engine.run_until_idle()
    assert engine.counters.draft_tokens == 0  # drafts are checked by argmax: only greedy requests take them
    engine = _engine(folder, 0, deterministic=False)
    _generate(engine, [PROMPTS[0] * 3])
    assert engine.counters.draft_tokens == 0


def test_negative_speculative_tokens_is_refused():
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="speculative_tokens"):
        EngineConfig(speculative_tokens=-1)



def test_dossier_run_reports_the_draft_tokens_it_tried_and_kept(tiny_llama, tmp_path, monkeypatch):
    """`dossier run` prints and records the engine's draft counts (here every draft is a token the model never
    picks at that row, so all are tried and none kept); `--speculative-tokens 0` tries none."""
    import json

    from typer.testing import CliRunner

    from engine.cli.main import app

    monkeypatch.setattr(llm_engine, "propose", lambda token_ids, most: [token_ids[-1]] * most)
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "What was revenue?", "answers": [["7"]]}\n')

    def run(out, *flags):
        result = CliRunner().invoke(app, ["run", "--agent", "closed-book", "--model", str(tiny_llama[0]),
                                          "--questions", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / out),
                                          "--max-turn-tokens", "16", "--dtype", "float32", "--kv-cache-gib", "0.05",
                                          *flags])
        assert result.exit_code == 0, result.output
        return result.output, json.loads((tmp_path / out / "run_summary.json").read_text())["engine"]

    shown, counts = run("on")
    assert counts["draft_tokens"] > 0 and f"draft tokens {counts['draft_tokens']:,} tried" in shown
    shown, counts = run("off", "--speculative-tokens", "0")
    assert counts["draft_tokens"] == 0 and "draft tokens" not in shown


def test_drafts_take_only_the_budget_a_prompt_leaves(tiny_llama, monkeypatch):
    """A turn arriving while another decodes, in a 16-token step: the prompt gets its 12 tokens first, and the
    decoding request's drafts only the 3 left (not 8 drafts first and the prompt cut to 7)."""
    monkeypatch.setattr(llm_engine, "propose", lambda token_ids, most: [token_ids[-1]] * most)
    engine = _engine(tiny_llama[0], 8, max_num_batched_tokens=16)
    steps = []
    run = engine.runner.run

    def spied(chunks):
        steps.append([(chunk.length, chunk.drafts, bool(chunk.request.output_token_ids)) for chunk in chunks])
        return run(chunks)

    engine.runner.run = spied
    first = engine.open_session()
    first.append(PROMPTS[0])
    engine.submit(first, SamplingParams(max_new_tokens=30, ignore_eos=True))
    engine.step()
    engine.step()
    second = engine.open_session()
    second.append(PROMPTS[1][:12])
    engine.submit(second, SamplingParams(max_new_tokens=30, ignore_eos=True))
    engine.step()
    assert steps[-1] == [(1 + 3, 3, True), (12, 0, False)], steps[-1]
    assert steps[1][0][1] == 8  # alone, the decoding request drafted its full 8
    engine.run_until_idle()
    engine.block_manager.check_invariants()


def test_drafts_stay_off_away_from_the_cpu(tiny_llama):
    """Not measured on a GPU yet: an engine whose model is not on the CPU gets no drafter, and says why."""
    import torch

    engine = _engine(tiny_llama[0], 8)
    assert engine.speculation_blocker() is None and engine.scheduler.drafter is not None
    engine.runner.device = torch.device("meta")  # what the check reads; a CUDA engine's model is on "cuda"
    assert "CPU only" in engine.speculation_blocker()


# A schema whose frame is long and forced: only the string's few characters are the model's choice.
FRAME_SCHEMA = {"type": "object", "properties": {"search_documents_query": {"type": "string", "maxLength": 6}},
                "required": ["search_documents_query"], "additionalProperties": False}


def test_guesses_are_cut_to_what_the_grammar_allows_and_forced_tokens_fill_in(tiny_llama, monkeypatch):
    """With a grammar, history guesses stop at the first token it refuses; with no guess left, the drafts are what
    it forces (xgrammar's jump-forward tokens), within the room given; sampled replies draft nothing."""
    guesses = []
    monkeypatch.setattr(llm_engine, "propose", lambda token_ids, most: list(guesses[:most]))
    engine = _engine(tiny_llama[0], 4)
    session = engine.open_session()
    session.append(PROMPTS[0])
    request = engine.submit(session, SamplingParams(max_new_tokens=40, json_schema=FRAME_SCHEMA))
    forced = request.matcher.find_jump_forward_tokens()
    assert len(forced) >= 5  # `{"search_documents_query": ` in the test tokenizer's pieces
    tokens, positions, next_position = engine._drafts(request, 30)
    assert tokens == forced and engine.counters.draft_tokens_forced == len(forced)
    assert list(positions) == list(range(len(PROMPTS[0]), len(PROMPTS[0]) + len(forced)))
    assert engine._drafts(request, 2)[0] == forced[:2]
    refused = next(t for t in range(engine.adapter.shape.vocab_size) if t != forced[1])  # the grammar wants forced[1]
    guesses[:] = [forced[0], refused, forced[2]]
    assert engine._drafts(request, 30)[0] == forced[:1]  # the guess, cut where the grammar refuses it
    assert engine.counters.draft_tokens_forced == len(forced) + 2  # (a guess is not counted as forced)
    guesses[:] = [refused]
    request.forced_misses = FORCED_MISSES  # the model turned forced drafts down twice in a row: none any more
    assert engine._drafts(request, 30) is None
    sampled = engine.open_session()
    sampled.append(PROMPTS[1])
    other = engine.submit(sampled, SamplingParams(max_new_tokens=40, temperature=0.8, json_schema=FRAME_SCHEMA))
    assert engine._drafts(other, 30) is None  # drafts are checked by argmax: greedy replies only


class _Forces:
    """A matcher whose jump-forward tokens are given, its first `times` calls (then the real ones): the grammar's
    state and forced text stay the real ones. Tokens the grammar refuses play a model that splits text its own way."""

    def __init__(self, matcher, tokens: list[int], times: float = float("inf")) -> None:
        self._matcher, self._tokens, self._times = matcher, tokens, times

    def find_jump_forward_tokens(self):
        if self._times <= 0:
            return self._matcher.find_jump_forward_tokens()
        self._times -= 1
        return list(self._tokens)

    def __getattr__(self, name):
        return getattr(self._matcher, name)


def test_forced_tokens_take_back_the_last_piece_xgrammar_leaves_out(tiny_llama):
    """xgrammar omits a last token a longer one could extend; the tokenizer's split of the forced text adds it back
    where the two agree, and nothing where they differ."""
    engine = _engine(tiny_llama[0], 8)
    session = engine.open_session()
    session.append(PROMPTS[0])
    matcher = engine.submit(session, SamplingParams(max_new_tokens=40, json_schema=FRAME_SCHEMA)).matcher
    text = matcher.find_jump_forward_string()
    usual = engine.processor.tokenizer.encode(text, add_special_tokens=False)
    assert text.startswith('{"search_documents_query') and len(usual) >= 3
    assert engine._forced_tokens(_Forces(matcher, usual[:-1])) == usual
    assert engine._forced_tokens(_Forces(matcher, usual[:1])) == usual
    other = [usual[1]]  # not how the tokenizer starts the text: left as xgrammar gave it
    assert engine._forced_tokens(_Forces(matcher, other)) == other

    def busy(*args, **kwargs):
        raise RuntimeError("Already borrowed")  # a fast tokenizer in use by another thread

    engine.processor.tokenizer.encode = busy
    assert engine._forced_tokens(_Forces(matcher, usual[:-1])) == usual[:-1]  # xgrammar's tokens alone, no error


@pytest.mark.parametrize("misses", [1, 100])
def test_a_reply_stops_drafting_forced_tokens_after_two_misses_in_a_row(tiny_llama, misses):
    """Forced drafts whose first token the model turns down twice in a row stop for the rest of the reply; one miss
    (Qwen2.5-Coder's `<` for `<tool_call>`) does not stop them. The reply is an engine's that never drafts."""
    folder = tiny_llama[0]
    engine = _engine(folder, 8)
    session = engine.open_session()
    session.append(PROMPTS[0])
    request = engine.submit(session, SamplingParams(max_new_tokens=24, json_schema=FRAME_SCHEMA))
    vocab = engine.adapter.shape.vocab_size
    refused = next(t for t in range(vocab) if not request.matcher.fork().accept_token(t))
    request.matcher = _Forces(request.matcher, [refused] * 6, times=misses)
    engine.run_until_idle()
    counters = engine.counters
    if misses > FORCED_MISSES:
        assert request.forced_misses == FORCED_MISSES
        assert counters.draft_tokens_forced == 6 * FORCED_MISSES and counters.draft_tokens_accepted == 0
    else:
        assert counters.draft_tokens_forced > 6  # after the one miss, forced tokens were drafted again
    plain_engine = _engine(folder, 0)
    again = plain_engine.open_session()
    again.append(PROMPTS[0])
    expected = plain_engine.submit(again, SamplingParams(max_new_tokens=24, json_schema=FRAME_SCHEMA))
    plain_engine.run_until_idle()
    assert request.output_token_ids == expected.output_token_ids


def test_a_forced_frame_is_drafted_in_the_prompt_step_and_changes_no_reply(tiny_llama):
    """Replies held to a schema: each prompt's own step carries its forced frame as drafts, the model keeps them,
    and every reply equals an engine's that never drafted (deterministic mode), in fewer steps."""
    folder = tiny_llama[0]

    def replies(engine):
        requests = []
        for prompt in PROMPTS:
            session = engine.open_session()
            session.append(prompt)
            requests.append(engine.submit(session, SamplingParams(max_new_tokens=24, json_schema=FRAME_SCHEMA)))
        engine.run_until_idle()
        engine.block_manager.check_invariants()
        return [request.output_token_ids for request in requests]

    plain_engine = _engine(folder, 0)
    plain = replies(plain_engine)
    engine = _engine(folder, 8)
    steps = []
    run = engine.runner.run

    def spied(chunks):
        steps.append([(chunk.start, chunk.drafts) for chunk in chunks])
        return run(chunks)

    engine.runner.run = spied
    assert replies(engine) == plain
    assert [start for start, _ in steps[0]] == [0, 0, 0]  # the first step is the three prompts
    assert all(drafts >= 5 for _, drafts in steps[0]), steps[0]  # each with its forced frame
    counters = engine.counters
    assert counters.draft_tokens_forced > 0 and counters.draft_tokens_accepted >= 15, counters
    assert counters.forward_steps < plain_engine.counters.forward_steps
