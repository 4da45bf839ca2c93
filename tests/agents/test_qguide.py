"""Q-Guide's loop with scripted policies: rounds, the forced submission, the gate, verification, chunk
adjudication with arbitration, bad calls as observations, lookups, and budget branches equal to separate runs."""

import json

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.qguide import prompts
from engine.agents.qguide.longdoc import ChunkAnswer, adjudicate, chunk_ranges
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import load_predictions
from engine.datasets.formats import Evidence, Question, write_jsonl
from tests.pdfs import make_pdf

LONG = [f"Section {i}. Nothing about fees here." for i in range(1, 7)]
LONG[4] = "Section 5. The annual fee is $120."


def make_corpus(root):
    """A 2-page memo and a 6-page document, ingested and indexed."""
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    make_pdf(root / "pdfs" / "memo.pdf", ["Revenue in 2019 was $48,250 thousand.", "Capital expenditure was $2,740."])
    make_pdf(root / "pdfs" / "long.pdf", LONG)
    ingest([root / "pdfs"], root / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(root / "corpus"))
    return root / "corpus"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("qguide"))


def q(qid="q1", document="memo", text="What was revenue in 2019?"):
    extra = {"document": document} if document else {}
    return Question(qid, text, [["$48,250"]], [Evidence("memo", 1)], extra)


def perceive(*calls):
    return json.dumps({"tool": "perceive", "calls": [{"name": n, "arguments": a} for n, a in calls]})


def submit(answer, confidence, citations=(), reasoning="read it"):
    return json.dumps({"tool": "submit", "answer": [answer], "citations": list(citations), "reasoning": reasoning,
                       "confidence": confidence})


def forced(messages) -> bool:
    return messages[-1][1] == prompts.FORCED


def run(tmp_path, corpus, policy, questions, **settings):
    settings = AgentSettings(agent="qguide", observe="text", **settings)
    backend = ScriptedBackend(policy)
    out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    RolloutRunner(backend, settings, AgentEnv(corpus), out, concurrency=4).run(questions)
    write_jsonl(out / "questions.jsonl", questions)
    (out / "run.json").write_text(json.dumps({"agent": "qguide", "questions": "questions.jsonl",
                                              "settings": settings.to_json()}))
    preds, errors = load_predictions(out / "predictions.jsonl")
    assert errors == []
    trajs = {t["id"]: t for t in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    return {p.id: p for p in preds}, trajs, backend


def test_parallel_calls_are_one_round_and_each_is_an_observation(tmp_path, corpus):
    seen = {}

    def policy(qid, turn, messages):
        if turn == 1:
            return perceive(("text_recovery", {"document": "memo", "page": 1}),
                            ("spatial_recovery", {"document": "memo", "page": 1, "mode": "words", "query": "48,250"}),
                            ("text_recovery", {"document": "memo", "page": 2, "region": [0, 0, 1, 0.5]}))
        seen["observations"] = messages[-1][1]
        return submit("$48,250", "high", [{"document": "memo", "page": 1}])

    preds, trajs, _ = run(tmp_path, corpus, policy, [q()], max_rounds=3)
    t = trajs["q1"]
    assert [s["role"] for s in t["steps"]] == ["policy", "policy"] and t["qguide"]["turns"] == 2
    obs = t["steps"][0]["tool_result"]["observations"]
    assert [o["tool"] for o in obs] == ["text_recovery", "spatial_recovery", "text_recovery"]
    assert obs[2]["region"] == [0.0, 0.0, 1.0, 0.5] and "Capital expenditure" in obs[2]["content"]["text"]
    assert "[o1] text_recovery · memo p.1" in seen["observations"] and "[o3]" in seen["observations"]
    assert t["qguide"]["decision"] == "passed" and t["qguide"]["tool_calls"] == {"text_recovery": 2, "spatial_recovery": 1}
    assert preds["q1"].answer == ["$48,250"] and preds["q1"].iterations == 2
    assert t["steps"][0]["context"]["pages"] > 0 and t["steps"][1]["context"]["observations"] > 0


@pytest.mark.parametrize("max_rounds", [1, 3])
def test_t_max_counts_turns_and_the_limit_turn_is_submit_unknown(tmp_path, corpus, max_rounds):
    """Eq. 3 counts turns: T_max - 1 rounds of tool calls run (none at T_max = 1, the single pass), and the
    policy asking for more at turn T_max is submit_unknown: no tools run and the answer is Unknown. The
    limit turn is a free turn."""
    def policy(qid, turn, messages):
        return perceive(("text_recovery", {"document": "memo", "page": 1}))  # never submits

    preds, trajs, backend = run(tmp_path, corpus, policy, [q()], max_rounds=max_rounds)
    t = trajs["q1"]
    assert [s["role"] for s in t["steps"]] == ["policy"] * max_rounds
    rounds_run = [s for s in t["steps"] if s["tool_result"] and "observations" in s["tool_result"]]
    assert len(rounds_run) == max_rounds - 1 and t["qguide"]["rounds"] == max_rounds - 1
    assert all("perceive" in json.dumps(turn.schema) for _, turn in backend.submitted)  # never forced
    assert f"is T_max = {max_rounds}: no tools run" in t["steps"][-1]["tool_result"]["error"]
    assert preds["q1"].answer == ["Unknown"] and t["qguide"]["decision"] == "submit_unknown"
    assert t["qguide"]["at_limit"] == "unknown" and preds["q1"].extra["finish"] == "max_rounds"


def test_a_submission_on_the_limit_turn_meets_the_gate(tmp_path, corpus):
    def policy(qid, turn, messages):
        if turn <= 2:
            return perceive(("text_recovery", {"document": "memo", "page": turn}))
        return submit("$48,250", "high", [{"document": "memo", "page": 1}])

    preds, trajs, _ = run(tmp_path, corpus, policy, [q()], max_rounds=3)  # turn 3 is the limit turn
    assert preds["q1"].answer == ["$48,250"] and trajs["q1"]["qguide"]["decision"] == "passed"
    assert trajs["q1"]["qguide"]["rounds"] == 2 and trajs["q1"]["qguide"]["turns"] == 3


def test_at_limit_force_admits_only_submit_at_turn_t_max(tmp_path, corpus):
    def policy(qid, turn, messages):
        return perceive(("text_recovery", {"document": "memo", "page": 1}))  # never submits, even when forced

    preds, trajs, backend = run(tmp_path, corpus, policy, [q()], max_rounds=4, at_limit="force")
    schemas = [turn.schema for _, turn in backend.submitted]
    assert [("perceive" in json.dumps(s)) for s in schemas] == [True, True, True, False]  # turn 4: submit only
    assert backend.submitted[3][1].messages[-1][1] == prompts.FORCED
    t = trajs["q1"]
    assert [s["role"] for s in t["steps"]] == ["policy", "policy", "policy", "forced"]
    assert "only submit" in t["steps"][3]["tool_result"]["error"] and t["qguide"]["rounds"] == 3
    assert preds["q1"].answer == ["Unknown"] and t["qguide"]["decision"] == "no_submission"
    assert preds["q1"].extra["finish"] == "max_rounds" and t["qguide"]["at_limit"] == "force"


def test_free_rounds_have_room_for_four_calls(tmp_path, corpus):
    from engine.agents.qguide.protocol import ROUND_TOKENS

    def policy(qid, turn, messages):
        return perceive(("text_recovery", {"document": "memo", "page": 1}))

    _, _, backend = run(tmp_path, corpus, policy, [q()], max_rounds=3, max_new_tokens=256, at_limit="force")
    budgets = [turn.max_new_tokens for _, turn in backend.submitted]
    assert budgets[:2] == [ROUND_TOKENS, ROUND_TOKENS] and budgets[2] in (None, 256)  # the forced turn: the usual
    _, _, backend = run(tmp_path, corpus, policy, [q()], max_rounds=2, max_new_tokens=900)
    assert backend.submitted[0][1].max_new_tokens == 900  # a larger budget asked for is kept


def test_submit_carries_a_short_reasoning_recorded_in_the_trajectory(tmp_path, corpus):
    from engine.agents.qguide.protocol import MAX_REASONING_CHARS

    def policy(qid, turn, messages):
        return submit("$48,250", "high", reasoning="The table on page 1 states it. " * 20)

    _, trajs, backend = run(tmp_path, corpus, policy, [q()])
    t = trajs["q1"]
    recorded = t["steps"][0]["tool_call"]["arguments"]["reasoning"]
    assert recorded.startswith("The table on page 1 states it.") and len(recorded) <= MAX_REASONING_CHARS
    assert t["qguide"]["reasoning"] == recorded
    schema = backend.submitted[0][1].schema["anyOf"][1]
    assert "reasoning" in schema["required"] and schema["properties"]["reasoning"]["maxLength"] == MAX_REASONING_CHARS


@pytest.mark.parametrize("confidence,gate,expected", [
    ("high", "med", "passed"), ("med", "med", "passed"), ("low", "low", "passed"), ("med", "high", "verified"),
    ("low", "med", "verified"),
])
def test_gate_accepts_at_or_above_tau_and_verifies_below(tmp_path, corpus, confidence, gate, expected):
    def policy(qid, turn, messages):
        if turn == 1:
            return perceive(("text_recovery", {"document": "memo", "page": 1}))
        if turn == 2:
            return submit("$48,250", confidence)
        assert "below " + gate in messages[-1][1]
        return json.dumps({"supported": True, "observation": 1})

    preds, trajs, backend = run(tmp_path, corpus, policy, [q()], gate=gate)
    t = trajs["q1"]
    assert t["qguide"]["decision"] == expected and preds["q1"].answer == ["$48,250"]
    assert len(backend.submitted) == (3 if expected == "verified" else 2)
    if expected == "verified":
        assert t["steps"][-1]["role"] == "verify" and t["steps"][-1]["tool_result"]["supported"] is True


@pytest.mark.parametrize("verdict,reason", [
    ({"supported": False, "observation": 0}, "found no observation"),
    ({"supported": True, "observation": 7}, "does not exist"),
    ({"supported": True, "observation": 2}, "a failed tool call"),
])
def test_unsupported_low_confidence_answers_are_rewritten_to_unknown(tmp_path, corpus, verdict, reason):
    def policy(qid, turn, messages):
        if turn == 1:
            return perceive(("text_recovery", {"document": "memo", "page": 1}),
                            ("text_recovery", {"document": "memo", "page": 9}))  # no page 9: an error observation
        if turn == 2:
            return submit("$1 billion", "low", [{"document": "memo", "page": 1}])
        return json.dumps(verdict)

    preds, trajs, _ = run(tmp_path, corpus, policy, [q()])
    t = trajs["q1"]
    assert preds["q1"].answer == ["Unknown"] and preds["q1"].citations == [] and t["qguide"]["decision"] == "rewritten"
    assert reason in t["qguide"]["note"] and t["qguide"]["submitted"] == ["$1 billion"]
    assert preds["q1"].extra["finish"] == "abstained"


def test_below_gate_without_observations_is_rewritten_without_a_model_call(tmp_path, corpus):
    preds, trajs, backend = run(tmp_path, corpus, lambda qid, turn, m: submit("$48,250", "low"), [q()])
    assert len(backend.submitted) == 1 and preds["q1"].answer == ["Unknown"]
    assert "no observation" in trajs["q1"]["qguide"]["note"]


def test_a_bad_call_is_an_observation_and_the_episode_continues(tmp_path, corpus):
    def policy(qid, turn, messages):
        if turn == 1:
            return perceive(("no_such_tool", {}), ("text_recovery", {"document": "memo", "page": 1, "region": [2, 0, 1, 1]}))
        if turn == 2:
            assert "error: tool 'no_such_tool' is not offered" in messages[-1][1]
            assert "[o2] text_recovery" in messages[-1][1] and "outside the page" in messages[-1][1]
            return '{"tool": "perceive", "calls": ['  # cut off: malformed, fed back
        assert "not a valid turn" in messages[-1][1]
        return submit("$48,250", "high")

    preds, trajs, _ = run(tmp_path, corpus, policy, [q()], max_rounds=4)
    t = trajs["q1"]
    assert preds["q1"].answer == ["$48,250"] and t["qguide"]["turns"] == 3
    assert [o.get("error") is not None for o in t["steps"][0]["tool_result"]["observations"]] == [True, True]
    assert t["steps"][1]["tool_call"] is None and "invalid JSON" in t["steps"][1]["tool_result"]["error"]


def test_targeted_lookup_is_a_model_turn_of_its_own(tmp_path, corpus):
    def policy(qid, turn, messages):
        if messages[0][1] == prompts.LOOKUP_SYSTEM:
            assert "Revenue in 2019" in messages[-1][1] and "Question: Which year?" in messages[-1][1]
            return json.dumps({"answer": "2019", "confidence": "high"})
        if turn == 1:
            return perceive(("targeted_lookup", {"document": "memo", "page": 1, "question": "Which year?"}),
                            ("text_recovery", {"document": "memo", "page": 2}))
        assert "[o1] targeted_lookup" in messages[-1][1] and "answer: 2019 (confidence high)" in messages[-1][1]
        return submit("$48,250", "high")

    preds, trajs, backend = run(tmp_path, corpus, policy, [q()])
    roles = [s["role"] for s in trajs["q1"]["steps"]]
    assert roles == ["policy", "lookup", "policy"]
    content = trajs["q1"]["steps"][0]["tool_result"]["observations"][0]["content"]
    assert content["answer"] == "2019" and content["confidence"] == "high"
    assert trajs["q1"]["steps"][1]["tool_result"]["content"]["confidence"] == "high"
    assert backend.submitted[1][1].schema["properties"].keys() == {"answer", "confidence"}
    assert backend.submitted[1][1].schema["required"] == ["answer", "confidence"]


def test_a_lookup_reply_without_confidence_is_an_error_observation(tmp_path, corpus):
    def policy(qid, turn, messages):
        if messages[0][1] == prompts.LOOKUP_SYSTEM:
            return json.dumps({"answer": "2019"})
        if turn == 1:
            return perceive(("targeted_lookup", {"document": "memo", "page": 1, "question": "Which year?"}))
        assert "needs 'confidence'" in messages[-1][1]
        return submit("$48,250", "high")

    preds, _, _ = run(tmp_path, corpus, policy, [q()])
    assert preds["q1"].answer == ["$48,250"]


def test_collection_questions_may_search(tmp_path, corpus):
    def policy(qid, turn, messages):
        if turn == 1:
            assert "search(query)" in messages[0][1]
            return perceive(("search", {"query": "revenue 2019"}))
        assert "File: memo, Page: 1" in messages[-1][1]
        return submit("$48,250", "high", [{"document": "memo", "page": 1}])

    preds, trajs, _ = run(tmp_path, corpus, policy, [q(document=None)])
    obs = trajs["q1"]["steps"][0]["tool_result"]["observations"][0]
    assert obs["tool"] == "search" and obs["content"]["pages"][0] == {"document": "memo", "page": 1}
    assert preds["q1"].search_history == ["revenue 2019"] and trajs["q1"]["qguide"]["mode"] == "collection"


def test_adjudication_weights_abstentions_and_ties():
    assert chunk_ranges(6, 2, 0) == [(1, 2), (3, 4), (5, 6)] and chunk_ranges(8, 4, 1) == [(1, 4), (4, 7), (7, 8)]
    vote = adjudicate([ChunkAnswer(["A"], "low"), ChunkAnswer(["B"], "med"), ChunkAnswer(["Unknown"], "high")])
    assert vote.votes == {"a": 1, "b": 2} and vote.winner == 1  # med (2) beats low (1); Unknown does not vote
    vote = adjudicate([ChunkAnswer(["1,284"], "low"), ChunkAnswer(["1284."], "low"), ChunkAnswer(["B"], "med")])
    assert vote.votes == {"1284": 2, "b": 2} and vote.winner is None and vote.tied == [0, 2]
    vote = adjudicate([ChunkAnswer(["A"], "high"), ChunkAnswer(["B"], "low"), ChunkAnswer(["B"], "low"),
                       ChunkAnswer(["B"], "low")])
    assert vote.winner is None and vote.tied == [0, 1]  # 3 vs 1 + 1 + 1
    vote = adjudicate([ChunkAnswer(["Unknown"], "high"), ChunkAnswer(["A"], None)])
    assert vote.votes == {} and vote.winner is None and vote.tied == []


def test_long_documents_are_chunked_adjudicated_and_ties_arbitrated(tmp_path, corpus):
    answers = {1: ("$100", "med"), 2: ("$120", "med"), 3: ("Unknown", "high")}  # chunks: pages 1-2, 3-4, 5-6

    def policy(qid, turn, messages):
        if qid.endswith("#chunk1") or qid.endswith("#chunk2") or qid.endswith("#chunk3"):
            answer, confidence = answers[int(qid[-1])]
            return submit(answer, confidence)
        assert "Candidate 1: ['$100'] (confidence med)" in messages[-1][1] and "Candidate 2: ['$120']" in messages[-1][1]
        return json.dumps({"choice": 2})

    question = Question("f1", "What is the annual fee?", [["$120"]], [Evidence("long", 5)], {"document": "long"})
    preds, trajs, backend = run(tmp_path, corpus, policy, [question], chunk_pages=2, chunk_overlap=0, gate="low")
    t = trajs["f1"]
    assert t["qguide"]["mode"] == "chunked" and [c["pages"] for c in t["qguide"]["chunks"]] == [[1, 2], [3, 4], [5, 6]]
    assert t["qguide"]["adjudication"]["3"]["votes"] == {"$100": 2, "$120": 2}
    assert t["qguide"]["adjudication"]["3"]["tied"] == [0, 1] and "chose candidate 2" in t["qguide"]["adjudication"]["3"]["arbitration"]
    assert preds["f1"].answer == ["$120"] and [s["role"] for s in t["steps"]][-1] == "arbitrate"
    assert [s.get("chunk") for s in t["steps"][:3]] == [1, 2, 3]
    # chunk 2 holds pages 3-4 in context, labelled
    chunk2 = [turn for qid, turn in backend.submitted if qid == "f1#chunk2"][0]
    assert "File: long, Page: 3" in chunk2.messages[1][1] and "File: long, Page: 5" not in chunk2.messages[1][1]


def test_a_clear_majority_needs_no_arbitration(tmp_path, corpus):
    def policy(qid, turn, messages):
        return submit({"1": "$100", "2": "$120", "3": "$120"}[qid[-1]], "low")

    question = Question("f2", "What is the annual fee?", [["$120"]], [Evidence("long", 5)], {"document": "long"})
    preds, trajs, backend = run(tmp_path, corpus, policy, [question], chunk_pages=2, chunk_overlap=0, gate="low")
    assert preds["f2"].answer == ["$120"] and len(backend.submitted) == 3
    assert trajs["f2"]["qguide"]["adjudication"]["3"] == {"votes": {"$100": 1, "$120": 2}, "winner": 1, "tied": []}


def test_longdoc_retrieve_reads_the_best_pages_in_one_loop(tmp_path, corpus):
    def policy(qid, turn, messages):
        assert "#chunk" not in qid  # one loop, no chunks
        return submit("$120", "high", [{"document": "long", "page": 5}])

    question = Question("f3", "What is the annual fee?", [["$120"]], [Evidence("long", 5)], {"document": "long"})
    preds, trajs, backend = run(tmp_path, corpus, policy, [question], chunk_pages=2, longdoc="retrieve")
    t = trajs["f3"]["qguide"]
    assert t["mode"] == "retrieved" and 5 in t["pages"] and len(t["pages"]) <= 2 and t["pages"] == sorted(t["pages"])
    assert t["retrieval"]["hits"][0]["page"] == 5 and t["retrieval"]["note"] == ""
    shown = backend.submitted[0][1].messages[1][1]
    assert "File: long, Page: 5" in shown and "annual fee is $120" in shown
    assert preds["f3"].answer == ["$120"] and len(backend.submitted) == 1
    _, chunked, _ = run(tmp_path, corpus, lambda qid, turn, m: submit("$120", "high"), [question], chunk_pages=2)
    assert chunked["f3"]["qguide"]["mode"] == "chunked"  # the default stays the paper's chunking


def test_bad_qguide_options_are_refused_with_the_choices():
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="at_limit must be one of unknown, force"):
        AgentSettings(agent="qguide", at_limit="never")
    with pytest.raises(DossierError, match="longdoc must be one of chunk, retrieve"):
        AgentSettings(agent="qguide", longdoc="all")
    with pytest.raises(DossierError, match="--gate auto needs --rho-min"):
        AgentSettings(agent="qguide", gate="auto")


def test_tau_is_the_lowest_level_whose_reliability_reaches_rho_min():
    from engine.agents.qguide.calibrate import choose_tau, reliability_table

    # hand-built: low 1 of 4 right (and one "Unknown" that commits to nothing), med 3 of 4, high 2 of 2
    records = ([("low", ["a"], True)] + [("low", ["b"], False)] * 3 + [("low", ["Unknown"], False)]
               + [("med", ["c"], True)] * 3 + [("med", ["d"], False)] + [("high", ["e"], True)] * 2)
    table = reliability_table(records)
    assert [(r["level"], r["committed"], r["rho"]) for r in table] == [("low", 4, 0.25), ("med", 4, 0.75),
                                                                     ("high", 2, 1.0)]
    assert table[0]["submissions"] == 5
    assert [choose_tau(table, rho) for rho in (0.2, 0.25, 0.5, 0.75, 0.8, 1.0)] == ["low", "low", "med", "med",
                                                                                    "high", "high"]
    no_med = reliability_table([("low", ["a"], False), ("high", ["b"], True)])
    assert choose_tau(no_med, 0.5) == "high" and choose_tau(reliability_table([("low", ["a"], False)]), 0.5) is None


def test_gate_auto_takes_tau_from_a_calibration_run_on_other_documents(tmp_path, corpus, capsys):
    from engine.agents.qguide.calibrate import format_table, resolve_gate
    from tools.errors import DossierError

    def calibrating(qid, turn, messages):  # med answers are right, high ones wrong: ρ(med)=1, ρ(high)=0
        return submit("$48,250" if qid == "c1" else "$2,740" if qid == "c2" else "nonsense",
                      "high" if qid == "c3" else "med")

    memo = [q("c1"), Question("c2", "Capital expenditure?", [["$2,740"]], [Evidence("memo", 2)], {"document": "memo"}),
            Question("c3", "Revenue?", [["$48,250"]], [Evidence("memo", 1)], {"document": "memo"})]
    run(tmp_path, corpus, calibrating, memo, gate="low")
    calibration = tmp_path / "run0"
    test = [Question("t1", "What is the annual fee?", [["$120"]], [Evidence("long", 5)], {"document": "long"})]
    resolved = resolve_gate(calibration, 0.9, test)
    assert resolved["tau"] == "med" and [r["rho"] for r in resolved["table"]] == [None, 1.0, 0.0]
    printed = format_table(resolved)
    assert "τ = min{ℓ : ρ(ℓ) ≥ 0.9} = med" in printed and "med   ρ 1.000  (2/2 committed" in printed
    with pytest.raises(DossierError, match="split the questions by document"):
        resolve_gate(calibration, 0.9, [q("t2")])  # the memo again: refused
    with pytest.raises(DossierError, match="not a run directory"):
        resolve_gate(tmp_path / "nowhere", 0.9, test)
    from engine.agents.qguide.calibrate import check_questions
    from engine.agents.qguide.settings import QGuideSettings

    with pytest.raises(DossierError, match="question t2 is about memo"):
        check_questions(resolved, [test[0], q("t2")])
    check_questions(resolved, test)  # the long document: not calibrated on
    settings = AgentSettings(agent="qguide", gate="auto", rho_min=0.9, calibration=str(calibration))
    assert settings.gate_table["tau"] == "med" and settings.gate_table["documents"] == ["memo"]
    assert capsys.readouterr().err == ""  # the settings check prints nothing: the run start shows the table
    assert QGuideSettings.run_start(settings, test) == printed.splitlines()
    with pytest.raises(DossierError, match="question t2 is about memo"):
        QGuideSettings.run_start(settings, [q("t2")])
    assert settings.to_json()["gate_table"]["table"][1]["rho"] == 1.0  # recorded in run.json

    def answering(qid, turn, messages):
        return submit("$120", "high" if qid.endswith("chunk2") else "low")  # low answers go to verification

    _, trajs, _ = run(tmp_path, corpus, answering, test, gate="auto", rho_min=0.9, calibration=str(calibration),
                      gate_table=resolved, chunk_pages=6)
    assert trajs["t1"]["qguide"]["gate"] == "med" and trajs["t1"]["qguide"]["decision"] == "rewritten"


def _budget_policy(qid, turn, messages):
    """Deterministic in the conversation: perceives page 1 then 2 then 1..., submits when forced.

    Its confidence grows with the observations it has, so budgets differ in answer and gate outcome.
    """
    seen = sum(m[1].count("[o") for m in messages[1:] if isinstance(m[1], str))
    if messages[-1][1] == prompts.FORCED:
        return submit(f"after {seen}", ("low", "med", "high")[min(seen, 2)])
    if "below" in messages[-1][1]:
        return json.dumps({"supported": seen > 0, "observation": 1 if seen else 0})
    if seen >= 4:
        return submit("done", "high")
    return perceive(("text_recovery", {"document": "memo", "page": 1 + seen % 2}))


@pytest.mark.parametrize("at_limit,expected", [
    ("unknown", {1: "Unknown", 2: "Unknown", 3: "Unknown", 4: "Unknown", 5: "done", 6: "done"}),
    ("force", {1: "Unknown", 2: "after 1", 3: "after 2", 4: "after 3", 5: "after 4", 6: "done"}),
])
def test_budget_sweep_equals_separate_runs(tmp_path, corpus, at_limit, expected):
    """One run at T_max = 6 answers every budget as a separate run at that budget would: under
    `unknown` from its own turns (the limit turn is the free turn), under `force` by branches."""
    questions = [q(), q("q2", text="What was capital expenditure?")]
    _, sweep, _ = run(tmp_path, corpus, _budget_policy, questions, max_rounds=6, max_rounds_sweep="1-6",
                      at_limit=at_limit)
    budget = sweep["q1"]["qguide"]["budget"]
    assert sorted(budget, key=int) == ["1", "2", "3", "4", "5", "6"]
    for k in range(1, 7):
        _, alone, _ = run(tmp_path, corpus, _budget_policy, questions, max_rounds=k, at_limit=at_limit)
        for qid in ("q1", "q2"):
            mine = {key: alone[qid]["qguide"][key] for key in ("answer", "decision", "turn", "rounds", "confidence")}
            assert {key: sweep[qid]["qguide"]["budget"][str(k)][key] for key in mine} == mine, (qid, k)
            assert alone[qid]["qguide"]["rounds"] == min(k - 1, 4)  # T_max - 1 rounds before turn T_max (Eq. 3)
    assert {k: budget[str(k)]["answer"][0] for k in range(1, 7)} == expected
    branches = {s["branch"] for s in sweep["q1"]["steps"] if "branch" in s}
    assert branches == (set() if at_limit == "unknown" else {1, 2, 3, 4, 5})  # the main line answers the rest


def test_a_call_repeated_in_one_round_runs_once(tmp_path, corpus):
    lookup = ("targeted_lookup", {"document": "memo", "page": 1, "question": "Which year?"})
    text = ("text_recovery", {"document": "memo", "page": 1})

    def policy(qid, turn, messages):
        if messages[0][1] == prompts.LOOKUP_SYSTEM:
            return json.dumps({"answer": "2019", "confidence": "med"})
        if turn == 1:
            return perceive(lookup, text, lookup, text)
        assert "[o3] targeted_lookup: the same call as [o1]" in messages[-1][1]
        assert "[o4] text_recovery: the same call as [o2]" in messages[-1][1]
        return submit("$48,250", "high")

    _, trajs, backend = run(tmp_path, corpus, policy, [q()])
    assert [s["role"] for s in trajs["q1"]["steps"]] == ["policy", "lookup", "policy"]  # one reader turn, not two
    assert len(trajs["q1"]["steps"][0]["tool_result"]["observations"]) == 4 and trajs["q1"]["qguide"]["observations"] == 4


def test_citations_are_bounded_by_the_cited_documents_page_count(tmp_path, corpus):
    """The memo has 2 pages: the schema given to the model caps its citations at page 2, and a
    citation of page 10 from an unconstrained model is dropped when parsing (the answer stays)."""
    def policy(qid, turn, messages):
        return submit("$48,250", "high", [{"document": "memo", "page": 10}, {"document": "memo", "page": 1}])

    preds, trajs, backend = run(tmp_path, corpus, policy, [q(), q("q2", document=None)])
    assert preds["q1"].citations == [Evidence("memo", 1)] and preds["q1"].answer == ["$48,250"]
    assert preds["q2"].citations == [Evidence("memo", 1)]
    schema = next(t.schema for qid, t in backend.submitted if qid == "q1")
    submit_part = schema["anyOf"][1]
    assert submit_part["properties"]["citations"]["items"]["properties"]["page"]["maximum"] == 2


def test_submit_and_round_schemas_bound_pages_and_free_text_with_xgrammar():
    """Compiled as the engine compiles them: page 10 of a 1-page poster and a 161-character lookup
    question are rejected; the longest allowed question and a valid page are accepted."""
    xgr = pytest.importorskip("xgrammar")
    from engine.agents.qguide.config import _narrow
    from engine.agents.qguide.protocol import round_schema, submit_schema
    from engine.core.structured import json_schema_grammar
    from tools.perception import TARGETED_LOOKUP
    from tools.perception.specs import MAX_TEXT_CHARS

    counts = {"poster": 1, "report": 9, "memo": 9}
    schema = round_schema([_narrow(TARGETED_LOOKUP, list(counts), None)], list(counts), counts)
    assert submit_schema(list(counts), counts) == schema["anyOf"][1]
    grammar = xgr.Grammar.from_ebnf(json_schema_grammar(schema))
    accepts = xgr.testing._is_grammar_accept_string

    def cite(document, page):
        return submit("x", "high", [{"document": document, "page": page}])

    def lookup(question):
        return perceive(("targeted_lookup", {"document": "poster", "page": 1, "question": question}))

    assert accepts(grammar, cite("poster", 1)) and accepts(grammar, cite("report", 9))
    assert not accepts(grammar, cite("poster", 10)) and not accepts(grammar, cite("poster", 2))
    assert not accepts(grammar, cite("report", 10)) and not accepts(grammar, cite("other", 1))
    assert accepts(grammar, lookup("q" * MAX_TEXT_CHARS))
    assert not accepts(grammar, lookup("q" * (MAX_TEXT_CHARS + 1)))
    # documents sharing a page count share one alternative: the grammar grows with distinct counts
    assert len(schema["anyOf"][1]["properties"]["citations"]["items"]["anyOf"]) == 2


def test_an_overlong_lookup_question_is_an_error_observation(tmp_path, corpus):
    """Without a grammar, a question over the limit is refused by the tool's check, and the model is told."""
    from tools.perception.specs import MAX_TEXT_CHARS

    def policy(qid, turn, messages):
        if turn == 1:
            return perceive(("targeted_lookup", {"document": "memo", "page": 1, "question": "w" * (MAX_TEXT_CHARS + 1)}))
        assert f"at most {MAX_TEXT_CHARS} characters" in messages[-1][1]
        return submit("$48,250", "high", [{"document": "memo", "page": 1}])

    preds, trajs, backend = run(tmp_path, corpus, policy, [q()])
    assert preds["q1"].answer == ["$48,250"] and len(backend.submitted) == 2  # no lookup reader turn ran


@pytest.mark.parametrize("page_text,sweep,withheld", [("shown", "", False), ("withheld", "", True),
                                                      ("auto", "", False), ("auto", "1-3", True)])
def test_page_text_withheld_leaves_the_evidence_to_the_tools(tmp_path, corpus, page_text, sweep, withheld):
    """A text model given the page's OCR text on turn 1 has no missing evidence for the tools to recover, so
    a budget sweep could not bind (issue 50): `page_text withheld` names the pages without their text, and
    "auto" withholds it when sweeping budgets."""
    first = {}

    def policy(qid, turn, messages):
        first.setdefault(qid, "\n".join(m[1] for m in messages if isinstance(m[1], str)))
        return submit("$48,250", "high")

    _, trajs, _ = run(tmp_path, corpus, policy, [q()], page_text=page_text, max_rounds=3, max_rounds_sweep=sweep)
    assert "File: memo, Page: 1" in first["q1"] and "File: memo, Page: 2" in first["q1"]
    assert ("$48,250 thousand" in first["q1"]) is not withheld
    assert ("their text is not shown here" in first["q1"]) is withheld
    assert trajs["q1"]["qguide"]["page_text"] == ("withheld" if withheld else "shown")
    assert trajs["q1"]["qguide"]["t_max_counts"] == "turns"


def test_visual_named_for_a_text_model_is_refused_not_offered_blind():
    """Leave-one-tool-out rows listed their tools by hand with "visual" in each, so a text model was offered a
    tool returning pixels it cannot read (24 calls in one row): naming it for a text model is an error now."""
    from engine.agents.qguide.config import parse_tools
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="offers visual_detail to a text model"):
        parse_tools("text,visual,spatial,structure", vision=False)
    with pytest.raises(DossierError, match="offers visual_detail to a text model"):
        AgentSettings(agent="qguide", observe="text", tools="text,visual")
    assert parse_tools("auto", vision=False) == ["text_recovery", "spatial_recovery", "structure_recovery",
                                                 "targeted_lookup"]
    assert "visual_detail" in parse_tools("text,visual", vision=True)


def test_page_text_must_be_one_of_its_values():
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="page_text must be one of auto, shown, withheld"):
        AgentSettings(agent="qguide", page_text="hidden")
