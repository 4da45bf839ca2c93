"""The workflow agent with scripted policies: every stage, the retries, the Unknown path, metadata filters,
records normalised by Dossier, and a program run in the real sandbox."""

import json

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import load_predictions
from tests.agents.workflow_scripted import (REVENUE_2023, answer_reply, build_corpus, code_reply, doc, plan_reply,
                                            question, reader, structurer, workflow_policy)
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("reports") / "c")


def steps_of(trajectory: dict, document: str) -> list[dict]:
    """A document's extraction steps, read from the episode's top-level steps."""
    return [s for s in trajectory["steps"] if s.get("document") == document]


def run(tmp_path, corpus, policy, questions=None, **settings):
    backend = ScriptedBackend(policy)
    env = AgentEnv(corpus, page_chars=400)
    out = tmp_path / "run"
    summary = RolloutRunner(backend, AgentSettings(agent="workflow", **settings), env, out).run(questions or [question()])
    preds, errors = load_predictions(out / "predictions.jsonl")
    assert not errors
    trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    return summary, {p.id: p for p in preds}, {t["id"]: t for t in trajs}, backend


def test_plan_extract_structure_code_answer_end_to_end(tmp_path, corpus):
    summary, preds, trajs, backend = run(tmp_path, corpus, workflow_policy(answers=[answer_reply("131.475 million")]))
    p, t = preds["w1"], trajs["w1"]
    assert p.answer == "131.475 million"  # the final-answer turn's, not the program's stdout
    assert summary.reasons == {"answered": 1}
    annual_2023 = sorted(doc(c, 2023) for c in REVENUE_2023)
    assert sorted((c.document, c.page) for c in p.citations) == [(d, 2) for d in annual_2023]
    flow = t["workflow"]
    assert flow["plan"]["documents"] == annual_2023  # the sustainability report of 2023 is filtered out
    assert {r["document"]: r["revenue"] for r in flow["records"]} == {doc(c, 2023): v for c, v in REVENUE_2023.items()}
    assert {r["revenue_unit"] for r in flow["records"]} == {"USD million"}
    alder = next(x for x in flow["extractions"] if x["document"] == "alder-ar-2023")
    assert alder["subquery"] == "What was the revenue of Alder in 2023 (annual report)?"  # filled by Dossier
    assert alder["answer"] == ["Revenue 97,300 (thousands of US dollars)"]
    alder_record = next(x for x in flow["structuring"] if x["document"] == "alder-ar-2023")
    assert alder_record["record"] == {"revenue": {"value": "97,300", "scale": "thousands", "unit": "USD"}, "page": 2}
    alder_steps = steps_of(t, "alder-ar-2023")
    assert [s["tool_call"]["name"] for s in alder_steps] == ["search", "answer", "record"]
    assert alder_steps[0]["tool_result"]["pages"][0] == {"document": "alder-ar-2023", "page": 2}
    # plan, each document's extraction, each document's structuring, then code and answer; numbered over the episode
    assert [s["stage"] for s in t["steps"]] == ["plan"] + ["extract"] * 8 + ["structure"] * 4 + ["code", "answer"]
    assert [s.get("document") for s in t["steps"][1:9]] == [d for d in annual_2023 for _ in range(2)]
    assert [s["step"] for s in t["steps"]] == list(range(1, 16))
    assert [t["steps"][n - 1] for n in alder["step_numbers"]] == alder_steps[:2] and "steps" not in alder
    assert t["steps"][-2]["tool_result"]["ok"] and t["workflow"]["code"][0]["result"]["stdout"] == "131.475\n"
    answer_prompt = t["steps"][-1]["input_delta"]  # the task, the records, the code and its output in one turn
    assert "Task: What was the average revenue" in answer_prompt and '"revenue": 97.3' in answer_prompt
    assert "statistics.mean" in answer_prompt and "It printed:\n131.475" in answer_prompt
    dialog = p.extra["document_dialogs"]["alder-ar-2023"]
    assert "A: Revenue 97,300 (thousands of US dollars) (pages 2)" in dialog and "Record: revenue 97.3" in dialog
    assert backend.opened == backend.closed == 1 + 4 + 4  # the parent, one extraction and one structuring per document
    child_turns = [turn for qid, turn in backend.submitted if "/" in qid and "/structure/" not in qid]
    assert len(child_turns) == 8 and all(t.schema is not None for t in child_turns)
    search_schema = child_turns[0].schema  # citations may name only the document being read
    assert search_schema["anyOf"][1]["properties"]["citations"]["items"]["properties"]["document"]["enum"] in (
        [[d] for d in annual_2023])


def test_the_records_grow_document_by_document(tmp_path, corpus):
    _, _, trajs, backend = run(tmp_path, corpus, workflow_policy())
    prompts = [turn.messages[1][1] for qid, turn in backend.submitted if "/structure/" in qid]
    shown = [p.split("Records so far: ", 1)[1].split("\n\nNew document", 1)[0] for p in prompts]
    assert shown[0] == "[] (this is the first document)"
    assert [len(json.loads(s)) for s in shown[1:]] == [1, 2, 3]  # each structuring sees the records before it
    assert json.loads(shown[3])[0]["document"] == "alder-ar-2023"
    assert len({p.split("Records so far")[0] for p in prompts}) == 1  # one shared prefix: task and fields first


def test_every_document_prompt_starts_with_the_same_prefix(tmp_path, corpus):
    _, _, _, backend = run(tmp_path, corpus, workflow_policy())
    firsts = [turn.messages for qid, turn in backend.submitted
              if "/" in qid and "/structure/" not in qid and len(turn.messages) == 2]
    assert len(firsts) == 4
    systems = {m[0][1] for m in firsts}
    users = [m[1][1] for m in firsts]
    assert len(systems) == 1 and all(u.startswith("Overall question (answered later from all documents): What was")
                                     for u in users)
    assert len({u.split("Document: ")[0] for u in users}) == 1  # document details only after the shared part


def test_invalid_plan_is_retried_once_with_the_error_shown(tmp_path, corpus):
    bad = plan_reply(restriction={"auditor": ["KPMG"]})
    summary, preds, trajs, backend = run(tmp_path, corpus, workflow_policy(plans=[bad, plan_reply()]))
    assert preds["w1"].answer == "131.475"
    steps = trajs["w1"]["steps"]
    assert [s["stage"] for s in steps] == ["plan", "plan"] + ["extract"] * 8 + ["structure"] * 4 + ["code", "answer"]
    assert "'auditor', which is not a metadata field" in steps[0]["tool_result"]["error"]
    assert "That plan failed: the plan's 'restriction' names 'auditor'" in steps[1]["input_delta"]


@pytest.mark.parametrize(("plans", "message"), [
    ([plan_reply(restriction={"year": [2019]}),
      plan_reply(templates=[{"subquery": "Revenue of {firm}?", "fields": ["revenue"]}])],
     "template 1 uses {firm}, which is not a metadata field"),
    (["not json", plan_reply(restriction={"year": [2030]})], 'the restriction {"year": [2030]} selects no document'),
    ([plan_reply(fields=[{"name": "revenue", "type": "number", "unit": "parsecs"}])] * 2,
     "number field 'revenue' has unit 'parsecs'"),
])
def test_a_plan_that_fails_twice_answers_unknown_with_the_reason(tmp_path, corpus, plans, message):
    summary, preds, trajs, backend = run(tmp_path, corpus, workflow_policy(plans=plans))
    p = preds["w1"]
    assert p.answer == "Unknown" and p.citations == [] and summary.reasons == {"unknown": 1}
    failure = p.extra["workflow"]["failure"]
    assert failure["stage"] == "planning" and message in failure["reason"]
    assert trajs["w1"]["final"]["failure"] == failure and backend.opened == 1  # no document was read


def test_code_error_is_retried_then_answers(tmp_path, corpus):
    codes = [code_reply("print(sum(r['revenue'] for r in records) / 0)"), code_reply()]
    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(codes=codes))
    assert preds["w1"].answer == "131.475"
    runs = trajs["w1"]["workflow"]["code"]
    assert runs[0]["result"]["error"] == "ZeroDivisionError: float division by zero" and runs[1]["result"]["ok"]
    code_steps = [s for s in trajs["w1"]["steps"] if s["stage"] == "code"]
    assert "That program failed: ZeroDivisionError: float division by zero" in code_steps[1]["input_delta"]


@pytest.mark.parametrize(("codes", "message"), [
    ([code_reply("import os\nprint(os.listdir('/'))")] * 2, "module 'os' is not allowed"),
    ([code_reply("x = [r['revenue'] for r in records]"), code_reply("print('x' * 3_000_000)")],
     "printed more than 1,000,000 bytes"),
    (['{"nothing": 1}', code_reply("print(open('/etc/passwd').read())")], "reading /etc/passwd is not allowed"),
])
def test_code_that_fails_twice_answers_unknown(tmp_path, corpus, codes, message):
    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(codes=codes))
    p = preds["w1"]
    assert p.answer == "Unknown" and p.extra["workflow"]["failure"]["stage"] == "code"
    assert message in p.extra["workflow"]["failure"]["reason"]
    assert len(p.extra["workflow"]["records"]) == 4  # the records were fine: the failure is the code's


def _never_answers_for(document: str):
    def child(qid, turn, messages):
        if qid.endswith(document):
            return json.dumps({"tool": "search", "query": "nothing here"})
        return reader(qid, turn, messages)

    return child


def test_a_document_that_never_answers_is_retried_then_left_out(tmp_path, corpus):
    policy = workflow_policy(child=_never_answers_for("dune-ar-2023"),
                             codes=[code_reply("print(len(records))")])
    _, preds, trajs, _ = run(tmp_path, corpus, policy, extract_iterations=3)
    p = preds["w1"]
    assert p.answer == "3"  # the program ran over the three documents that yielded records
    assert p.extra["workflow"]["failed_documents"] == [
        {"document": "dune-ar-2023", "stage": "extraction", "reason": "no answer (max_iterations)"}]
    dune = next(x for x in trajs["w1"]["workflow"]["extractions"] if x["document"] == "dune-ar-2023")
    dune_steps = steps_of(trajs["w1"], "dune-ar-2023")
    assert len(dune_steps) == 4 and len(dune["step_numbers"]) == 4  # 3 turns, then the retry that demands an answer
    assert "Answer now with the answer tool" in dune_steps[3]["input_delta"]
    assert "A: (no answer: no answer (max_iterations))" in p.extra["document_dialogs"]["dune-ar-2023"]
    assert [x["document"] for x in trajs["w1"]["workflow"]["structuring"]] == ["alder-ar-2023", "birch-ar-2023",
                                                                               "cedar-ar-2023"]  # dune not structured


def test_a_late_answer_after_the_retry_is_used(tmp_path, corpus):
    def child(qid, turn, messages):
        if qid.endswith("birch-ar-2023") and turn <= 3:
            return json.dumps({"tool": "search", "query": "revenue"})
        return reader(qid, turn, messages)

    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(child=child), extract_iterations=3)
    assert preds["w1"].answer == "131.475"  # Birch answered on its retry turn
    calls = [s["tool_call"]["name"] if s["tool_call"] else None for s in steps_of(trajs["w1"], "birch-ar-2023")]
    assert calls == ["search", "search", None, "answer", "record"]  # its third turn had to answer; the retry did


def test_a_record_of_the_wrong_type_is_retried_and_units_converted_by_dossier(tmp_path, corpus):
    seen = {}

    def structure(qid, turn, messages):
        if turn == 1 and qid.endswith("cedar-ar-2023"):  # a percent where the plan asks for money
            return json.dumps({"revenue": {"value": "131,500", "scale": "thousands", "unit": "percent"}, "page": 2})
        if turn == 2:
            seen[qid] = messages[-1][1]
        return structurer(qid, turn, messages)

    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(structure=structure))
    assert preds["w1"].answer == "131.475"
    assert seen["w1/structure/cedar-ar-2023"].startswith(
        "That record failed: the page gives percent, but the plan asks for money in USD million")
    cedar = next(x for x in trajs["w1"]["workflow"]["structuring"] if x["document"] == "cedar-ar-2023")
    assert cedar["row"]["revenue"] == 131.5 and cedar["error"] is None  # 131,500 thousands -> 131.5 million


def test_when_every_record_fails_structuring_the_answer_is_unknown(tmp_path, corpus):
    def structure(qid, turn, messages):
        return json.dumps({"revenue": {"value": "12", "scale": "units", "unit": "percent"}, "page": 2})

    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(structure=structure))
    p = preds["w1"]
    assert p.answer == "Unknown" and p.extra["workflow"]["failure"] == {
        "stage": "structuring", "reason": "none of the 4 documents yielded a record"}
    failed = p.extra["workflow"]["failed_documents"]
    assert {d["stage"] for d in failed} == {"structuring"} and len(failed) == 4
    assert {d["reason"] for d in failed} == {"the page gives percent, but the plan asks for money in USD million"}


def test_without_corpus_metadata_the_planner_never_sees_the_gold_documents(tmp_path):
    """The question carries MuDABench's metadata rows (its gold documents); the corpus has none: the planner must
    not be shown those rows, so the question is Unknown at planning, with the way out, and no model call is made."""
    root = build_corpus(tmp_path / "bare", metadata=False)
    q = question()
    assert q.extra["metadata"] and q.extra["evidence_documents"]  # the gold is there to leak
    _, preds, trajs, backend = run(tmp_path, root, workflow_policy(), questions=[q])
    p = preds["w1"]
    assert p.answer == "Unknown" and p.extra["workflow"]["failure"]["stage"] == "planning"
    assert "`dossier ingest --metadata FILE`" in p.extra["workflow"]["failure"]["reason"]
    assert p.extra["workflow"]["metadata"] is None and backend.submitted == []
    assert not any(d in json.dumps(trajs["w1"]) for d in q.extra["evidence_documents"])


def test_several_questions_run_together_and_resume(tmp_path, corpus):
    qs = [question("w1"), question("w2")]
    summary, preds, _, _ = run(tmp_path, corpus, workflow_policy(plans=[plan_reply()] * 2, codes=[code_reply()] * 2),
                               questions=qs)
    assert summary.episodes == 2 and {p.answer for p in preds.values()} == {"131.475"}
    again = ScriptedBackend(workflow_policy())
    rerun = RolloutRunner(again, AgentSettings(agent="workflow"), AgentEnv(corpus), tmp_path / "run").run(qs)
    assert rerun.skipped == 2 and again.opened == 0


def test_eval_counts_the_documents_searches_but_not_their_answers(tmp_path, corpus):
    """`dossier eval` of a workflow run: the children's searches are the episode's effort (4 documents x 1
    search), and a child's answer (one document's revenue) is not taken as the question's answer; the
    final-answer step's is."""
    from engine.datasets.formats import write_jsonl
    from engine.eval.compare import load_system
    from engine.eval.analyses.steps import answer_at_budget
    from engine.eval.trajectories import load_trajectories

    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy())
    out = tmp_path / "run"
    write_jsonl(tmp_path / "questions.jsonl", [question()])
    (out / "run.json").write_text(json.dumps({"agent": "workflow", "questions": str(tmp_path / "questions.jsonl")}))
    items, report = load_system(out)
    assert report["behaviour"]["searches_per_question"] == 4 == len(preds["w1"].search_history)
    (episode,), errors = load_trajectories(out / "trajectories.jsonl")
    assert not errors and [s.document for s in episode.searches] == sorted(doc(c, 2023) for c in REVENUE_2023)
    answers = [s for s in episode.steps if s.tool == "answer"]
    assert [s.document is not None for s in answers] == [True] * 4 + [False]  # one per document, then the final one
    assert answer_at_budget(episode, 4) == (True, "131.475")  # the final-answer step's, after all 4 searches
    assert answer_at_budget(episode, 3) == (False, None)  # no document's answer is taken for the question's


def test_a_document_is_structured_while_another_is_still_read(tmp_path, corpus):
    """Birch's reader takes three more searches than the others: Alder's structuring turn is submitted before
    Birch's extraction ends, the later documents are structured in the plan's order once Birch is, and the
    prompts and records are those of a run where every document reads at the same pace."""
    def slow_birch(qid, turn, messages):
        if qid.endswith("birch-ar-2023") and turn <= 4:
            return json.dumps({"tool": "search", "query": "revenue"})
        return reader(qid, turn, messages)

    _, preds, trajs, backend = run(tmp_path / "slow", corpus, workflow_policy(child=slow_birch), extract_iterations=6)
    order = [qid for qid, _ in backend.submitted]
    birch_last = max(i for i, qid in enumerate(order) if qid == "w1/birch-ar-2023")
    assert order.index("w1/structure/alder-ar-2023") < birch_last  # structuring overlaps extraction
    structured = [qid.rsplit("/", 1)[1] for qid in order if "/structure/" in qid]
    assert structured == sorted(doc(c, 2023) for c in REVENUE_2023)  # plan order, not the order they finished
    assert min(order.index(f"w1/structure/{d}") for d in structured[1:]) > birch_last
    code_turn = [i for i, qid in enumerate(order) if qid == "w1"][1]  # the parent's turn after its plan
    assert code_turn > order.index("w1/structure/dune-ar-2023") and preds["w1"].answer == "131.475"

    _, even, even_trajs, even_backend = run(tmp_path / "even", corpus, workflow_policy(), extract_iterations=6)
    prompts = lambda b: {qid: turn.messages for qid, turn in b.submitted if "/structure/" in qid}  # noqa: E731
    assert prompts(backend) == prompts(even_backend)  # the same records so far and dialogs in every prompt
    assert trajs["w1"]["workflow"]["records"] == even_trajs["w1"]["workflow"]["records"]
    assert [s["input_delta"] for s in trajs["w1"]["steps"] if s["stage"] in ("code", "answer")] == [
        s["input_delta"] for s in even_trajs["w1"]["steps"] if s["stage"] in ("code", "answer")]


def test_a_workflow_stopped_while_its_documents_are_read_resumes_from_their_recorded_turns(tmp_path, corpus):
    """Child episodes (one per document) replay their turns on resume like top-level ones do."""
    from tests.agents.scripted import counted, episodes_without_times

    def go(policy, out):
        return RolloutRunner(ScriptedBackend(policy), AgentSettings(agent="workflow"), AgentEnv(corpus, page_chars=400),
                             out).run([question()])

    whole, first, rest = [], [], []
    go(counted(workflow_policy(), whole), tmp_path / "whole")
    children = [i for i, (qid, _) in enumerate(whole) if "/" in qid]
    cut = children[len(children) // 2]  # the plan and half the documents' turns done
    with pytest.raises(KeyboardInterrupt):
        go(counted(workflow_policy(), first, stop_after=cut), tmp_path / "cut")
    # the turns the runner had been handed back (the stopped step's others were lost with it)
    recorded = len((tmp_path / "cut/turns.jsonl").read_text().splitlines())
    assert first == whole[:cut] and any("/" in qid for qid, _ in whole[:recorded])
    summary = go(counted(workflow_policy(), rest), tmp_path / "cut")
    assert summary.replayed == recorded and summary.episodes == 1
    assert len(rest) == len(whole) - recorded  # no recorded turn written again
    assert episodes_without_times(tmp_path / "cut") == episodes_without_times(tmp_path / "whole")
