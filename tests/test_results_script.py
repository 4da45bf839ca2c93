"""scripts/results.py: the tables are consistent, and --check re-scores a stored run to the stored figures."""

import json
import sys

import pytest

from tests.scripts import load_script

results = load_script("results")
results_common = sys.modules["results_common"]  # its helpers, shared with scripts/results_learning.py

QUESTIONS = [
    {"id": "q1", "question": "What was revenue in 2023?", "answer_variants": [["48,250"]],
     "evidence": [{"document": "report", "page": 2}]},
    {"id": "q2", "question": "Who signed the memo?", "answer_variants": [["Ana Ruiz"]],
     "evidence": [{"document": "memo", "page": 1}]},
    {"id": "q3", "question": "What is the fee?", "answer_variants": [["$25"]],
     "evidence": [{"document": "form", "page": 1}]},
]


def _store_run(root, suite, row_id, answers):
    """A finished run directory as `dossier run` leaves it (run.json, predictions.jsonl), for one row."""
    questions = root / suite / "questions.jsonl"
    questions.parent.mkdir(parents=True, exist_ok=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    run = root / "runs" / f"{suite}-{row_id}"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(questions),
                                              "engine": {"dtype": "auto", "quantization": None}}))
    lines = [{"id": q["id"], "question": q["question"], "answer": [a], "citations": [q["evidence"][0]],
              "iterations": 1} for q, a in zip(QUESTIONS, answers)]
    (run / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in lines))
    (run / "results_row.json").write_text(json.dumps({"command": "dossier run ...", "segments": [
        {"started": "2026-12-01T00:00:00", "load_start": [0.1, 0.1, 0.1], "load_end": [1.9, 1.0, 0.5],
         "cores": 2, "commit": "abc", "seconds": 12.5, "dtype_auto": "float32"}]}))
    return run


@pytest.fixture
def tiny_table(monkeypatch):
    table = results.Table("tiny", "A tiny table", "sample", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),
                           results.Row("b", "b-run", "system B", ("--agent", "rag"), model="default"),
                           results.Row("c", "c-run", "system C, never run", ("--agent", "oracle"), model="default")),
                          claims=(results.Claim("A beats B", "a", "b"),))
    monkeypatch.setitem(results.TABLES, "tiny", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    return table


def test_tables_are_consistent():
    results.check_tables()  # one configuration per run id, references and claims name rows
    assert {"madqa-sample", "dtypes-sample", "qguide-sample", "mudabench-sample"} <= set(results.TABLES)


def test_the_dtypes_reference_row_says_it_is_a_dequantised_q4_k_m():
    """Issue 50: the 'float32, no quantisation' row was the packaged Q4_K_M GGUF dequantised; the label and the
    table's notes say what it is."""
    table = results.TABLES["dtypes-sample"]
    reference = next(row for row in table.rows if row.name == table.reference)
    assert "dequantised" in reference.label and "Q4_K_M" in reference.label
    assert "no quantisation" not in reference.label
    assert any("Q4_K_M" in note and "unquantised" in note for note in table.notes)


def test_check_rescores_a_stored_run_to_the_same_figures(tmp_path, tiny_table, capsys):
    root, docs = tmp_path / "runs", tmp_path / "docs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    _store_run(root, "sample", "b-run", ["48,250", "nobody", "unknown"])
    result = results.score_table(tiny_table, root, docs / "runs")
    results.write_table(result, docs)

    a, b, c = result["rows"]
    assert a["figures"]["correct"] == 3 and b["figures"]["correct"] == 1
    assert a["figures"]["page_f1"] == 1.0
    assert b["vs_reference"]["only_b_correct"] == 2 and b["vs_reference"]["only_a_correct"] == 0
    assert c["status"] == "not run yet"
    assert result["claims"][0]["verdict"] == "inconclusive at n = 3"  # 2 discordant pairs cannot reach p < 0.05
    assert result["min_discordant_for_p05"] == 6
    markdown = (docs / "tiny.md").read_text()
    assert "3/3 = 100.0 %" in markdown and "1/3 = 33.3 %" in markdown and "abc" in markdown

    capsys.readouterr()
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    assert "3/3 = 100.0 %" in out and "re-score to the same figures" in out


def test_the_archive_alone_rescores_and_holds_no_machine_path(tmp_path, tiny_table, capsys):
    """A clean checkout has no run directories: --check re-scores the runs archived in the repository."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    (run / "trajectories.jsonl").write_text("")
    _store_run(root, "sample", "b-run", ["48,250", "nobody", "unknown"])
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    archived = docs / "runs" / "sample-a-run"
    assert sorted(p.name for p in archived.iterdir()) == ["predictions.jsonl", "results_row.json", "run.json",
                                                         "trajectories.jsonl.gz"]
    assert str(root) not in (archived / "run.json").read_text()
    assert (docs / "runs" / "sample" / "questions.jsonl").is_file()

    import shutil
    shutil.rmtree(root)  # the run directories are gone, as on a clean checkout
    capsys.readouterr()
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    assert "re-score to the same figures (3 rows)" in capsys.readouterr().out


def test_check_fails_when_a_stored_run_changed(tmp_path, tiny_table, capsys):
    root, docs = tmp_path / "runs", tmp_path / "docs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    run = docs / "runs" / run.name  # --check reads the archive, so change the archived prediction
    lines = (run / "predictions.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["answer"] = ["12"]
    (run / "predictions.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 1
    assert "differ for a-run" in capsys.readouterr().out


def test_unknown_table_is_refused(capsys):
    with pytest.raises(SystemExit):
        results.main(["no-such-table"])
    assert "unknown table(s) no-such-table" in capsys.readouterr().err


def _sweep_row(correct):
    n = 20
    points = [{"max_rounds": t, "correct": c, "accuracy": c / n} for t, c in enumerate(correct, start=1)]
    fit = {"A": 0.7, "B": 0.4, "k": 1.2, "t_star": 2.9} if len(set(correct)) > 1 else {"k": None, "t_star": None}
    q = {"n": n, "budget": {"points": points, "fit": fit}, "gate": "med", "decisions": {"passed": 18, "rewritten": 2},
         "abstained": 1, "reliability": [{"level": "high", "submissions": 19, "committed": 19, "correct": 12,
                                          "rho": 0.63, "rho_ci": [0.41, 0.81]}],
         "tools_offered": ["text_recovery"], "tool_calls": {"text_recovery": 30}, "mean_turns": 2.5}
    return {"name": "qguide", "status": "complete", "figures": {"n": n, "qguide": q}}


def test_a_budget_that_never_bound_is_not_testable_rather_than_not_reproduced():
    """Every episode submitted before any limit turn (the old sweep: one round, then submit, at every T), so the
    budget could not change an answer: "not testable as run", not "not reproduced" (issue 50 item 1)."""
    row = _sweep_row([7, 7, 7, 7])
    for point in row["figures"]["qguide"]["budget"]["points"]:
        point |= {"cut_by_limit": 0, "rounds_used": {"1": 13}}
    assert results.budget_claim([row], "qguide")["verdict"].startswith("not testable as run: the budget never bound")
    row["figures"]["qguide"]["budget"]["points"][0]["cut_by_limit"] = 5  # T = 1 ended five episodes
    assert results.budget_claim([row], "qguide")["verdict"] == "not reproduced: accuracy is the same at every T"
    lines = results.qguide_lines(row["figures"]["qguide"])
    assert lines[0].startswith("budget bound (episodes ended by the limit turn) and tool rounds used, per T: "
                               "T=1 cut 5, rounds 1:13; T=2 cut 0")


def test_every_claim_quotes_the_paper_and_its_condition():
    """Each claim line carries the paper's own words and the condition it holds under (issue 50 item 4); a
    significant opposite covered by the paper's stated exception says so rather than "not reproduced"."""
    for table in results.TABLES.values():
        for claim in table.claims:
            assert claim.quote.count('"') >= 2 and claim.condition, (table.name, claim.text)
    (madqa,) = results._MADQA_CLAIMS
    assert "Models incapable of these sub-tasks" in madqa.condition and madqa.exception.startswith("consistent with")
    markdown = results.render_markdown({"title": "t", "table": "t", "suite": "sample", "limit": None, "verdict": "correct",
                                        "reference": "bm25", "models": [], "rows": [], "min_discordant_for_p05": 6,
                                        "notes": [], "claims": [results.effort_claim([], "bm25")]})
    assert "  - the paper: MADQA" in markdown and "  - its condition: a comparison with human searchers" in markdown


@pytest.mark.parametrize("correct, verdict", [
    ([7, 7, 7, 7, 7, 7], "not reproduced: accuracy is the same at every T"),
    ([5, 9, 12, 12, 12, 12], "reproduced"),  # +7 from T = 1 to 3, t* = 2.9
    ([8, 9, 10, 10, 10, 10], "inconclusive at n = 20 (+2 right from T = 1 to 3)"),
    ([9, 8, 8, 8, 8, 8], "not reproduced: accuracy does not rise from T = 1 to T = 3"),
])
def test_the_budget_claim_is_read_off_the_sweep_curve(correct, verdict):
    claim = results.budget_claim([_sweep_row(correct)], "qguide")
    assert claim["verdict"] == verdict and claim["curve"] == correct
    assert results.budget_claim([{"name": "qguide", "status": "partial: 3 of 13"}], "qguide") is None


def test_qguide_analyses_are_rendered_as_readable_lines():
    lines = results.qguide_lines(_sweep_row([5, 9, 12, 12, 12, 12])["figures"]["qguide"])
    assert lines[0].startswith("accuracy by round budget: T=1 5/20, T=2 9/20") and "t★ = 2.900" in lines[0]
    assert "rewritten 2" in lines[1] and "abstained 1 of 20" in lines[1]
    assert "high 12/19 right of 19 submitted (ρ = 0.630 [0.410, 0.810])" in lines[2]
    assert "text_recovery 30" in lines[3]


def test_a_limited_table_scores_only_the_questions_it_ran(tmp_path, monkeypatch):
    """`--limit N` runs the suite's first N questions; the rest are not gold for the row, so not counted wrong."""
    table = results.Table("first-two", "The first two questions", "sample", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),), limit=2)
    monkeypatch.setitem(results.TABLES, "first-two", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    root = tmp_path / "runs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    lines = (run / "predictions.jsonl").read_text().splitlines()
    (run / "predictions.jsonl").write_text("\n".join(lines[:2]) + "\n")  # the run answered its first two

    (row,) = results.score_table(table, root, tmp_path / "docs" / "runs")["rows"]
    assert row["status"] == "complete"
    assert row["figures"]["n"] == 2 and row["figures"]["correct"] == 2


@pytest.fixture
def judged_table(tmp_path, monkeypatch):
    """A two-row table scored with a local judge, and the docs folder holding the judge's calibration."""
    spec = results.JudgeSpec("judge-model", "int8", "float32", "calibration.json")
    table = results.Table("judged", "A judged table", "sample", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),
                           results.Row("b", "b-run", "system B", ("--agent", "rag"), model="default")), judge=spec)
    monkeypatch.setitem(results.TABLES, "judged", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "calibration.json").write_text(json.dumps({"q0": 1.0, "q1": 1.0, "m0": 30, "m1": 30, "n": 60}))
    return spec, table, docs


def test_the_llm_judge_scores_from_its_archived_verdicts_and_judges_only_what_is_missing(tmp_path, monkeypatch,
                                                                                        judged_table):
    """judge_row judges each answer the two-stage rule sends to the judge once; scoring reads the cache only."""
    import engine.eval.judging as judging
    from engine.core.config import EngineConfig
    from engine.eval.judge import Verdict

    spec, table, docs = judged_table
    root = tmp_path / "runs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "25 dollars"])  # the third needs the judge
    _store_run(root, "sample", "b-run", ["48 250 USD", "Ana Ruiz", "25 dollars"])  # shares the third's verdict

    asked = []

    class ScriptedJudge:
        def __init__(self, model, engine_kwargs):
            assert engine_kwargs == {"dtype": "float32", "cpu_threads": 1, "quantization": "int8", "deterministic": True}
            EngineConfig(**engine_kwargs)  # real fields of the engine's config
            self.model, self.unparsed = model, 0

        def judge_all(self, items, on_verdict):
            for item in items:
                asked.append(" ".join(item.answer))
                on_verdict(item, Verdict.correct if "dollars" in item.answer[0] else Verdict.incorrect, "{}")

    monkeypatch.setattr(judging, "BatchedJudge", ScriptedJudge)
    (row_b,) = [r for r in table.rows if r.name == "b"]
    before = results.score_table(table, root, docs / "runs")
    assert before["rows"][0]["figures"]["judge"]["missing"] == 1 and before["rows"][0]["figures"]["judge"]["accuracy"] is None
    assert "not judged yet (1 answers)" in results.render_markdown(before)

    for row in table.rows:
        results.judge_row(table, row, root, threads=1)
    results.judge_row(table, row_b, root, threads=1)  # a second call finds every verdict in the cache
    assert sorted(asked) == ["25 dollars", "48 250 USD"]  # each distinct answer judged once

    result = results.score_table(table, root, docs / "runs")
    a, b = (r["figures"]["judge"] for r in result["rows"])
    assert a == {"missing": 0, "correct": 3, "raw": 1.0, "accuracy": 1.0, "accuracy_ci": a["accuracy_ci"], "calls": 1,
                 "judged_raw": 1.0, "clipped": None, "on_numeric": a["on_numeric"]}  # 2 exact matches, 1 judged
    assert b["raw"] == round(2 / 3, 4) and b["calls"] == 2 and b["correct"] == 2  # "48 250 USD" judged incorrect
    # the judge is a column of its own: ANLS*'s verdicts still make the accuracy, Kuiper and the tests
    assert result["rows"][0]["figures"]["correct"] == 2  # "25 dollars" for "$25": the judge accepts it, ANLS* does not
    assert (docs / "runs" / "sample" / "judge_cache-judge-model.jsonl").is_file()  # archived beside the runs
    results.write_table(result, docs)
    assert results.main(["judged", "--check", "--root", str(tmp_path / "none"), "--docs", str(docs)]) == 0


def test_a_fresh_checkout_keeps_the_archived_verdicts_and_never_judges_them_again(tmp_path, monkeypatch,
                                                                                  judged_table):
    """A new machine's live judge cache starts empty: judging one row there must neither drop the verdicts
    archived for the others (it did, copying the live cache over the archive) nor ask the judge for them."""
    import engine.eval.judging as judging
    from engine.eval.judge import Verdict

    spec, table, docs = judged_table
    first = tmp_path / "first"
    asked = []

    class ScriptedJudge:
        def __init__(self, model, engine_kwargs):
            self.model, self.unparsed = model, 0

        def judge_all(self, items, on_verdict):
            for item in items:
                asked.append(" ".join(item.answer))
                on_verdict(item, Verdict.correct, "{}")

    monkeypatch.setattr(judging, "BatchedJudge", ScriptedJudge)
    row_a, row_b = table.rows
    _store_run(first, "sample", "a-run", ["48,250", "Ana Ruiz", "25 dollars"])  # machine 1 runs and judges a
    results.judge_row(table, row_a, first, threads=1, archive=docs / "runs")
    results.score_table(table, first, docs / "runs")
    assert asked == ["25 dollars"]

    second = tmp_path / "second"  # machine 2: a fresh checkout runs b, whose answers share a's verdict
    _store_run(second, "sample", "b-run", ["48 250 USD", "Ana Ruiz", "25 dollars"])
    results.judge_row(table, row_b, second, threads=1, archive=docs / "runs")
    assert asked == ["25 dollars", "48 250 USD"]  # a's verdict came from the archive, not the judge
    result = results.score_table(table, second, docs / "runs")
    a, b = (r["figures"]["judge"] for r in result["rows"])
    assert a["missing"] == 0 and a["correct"] == 3  # the archive still holds a's verdict
    assert b["missing"] == 0 and b["correct"] == 3
    archived = docs / "runs" / "sample" / "judge_cache-judge-model.jsonl"
    lines = archived.read_text().splitlines()
    assert len(lines) == len({json.loads(line)["key"] for line in lines}) == 2  # a union, each verdict once

    third = tmp_path / "third"  # a live cache holding only a verdict the archive lacks is added, not copied over
    cache = spec.cache(third, "sample")
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"key": "another", "verdict": "incorrect", "model": "judge-model"}) + "\n")
    result = results.score_table(table, third, docs / "runs")
    assert all(r["figures"]["judge"]["missing"] == 0 for r in result["rows"])
    assert len(archived.read_text().splitlines()) == 3


def test_the_effort_claim_reads_the_kuiper_permutation_test():
    """MADQA's "effort is poorly calibrated" is comparative (agents' Kuiper against humans' 14.6, Table 3): with no
    human run it is not testable, and the within-row permutation test is reported beside it (issue 50 item 4)."""
    def rows(**figures):
        return [{"name": "bm25", "status": "complete", "figures": {"n": 50, "kuiper": 2.0, "kuiper_undefined": None,
                                                                   **figures}}]

    untestable = "not testable without a human baseline; "
    claim = results.effort_claim(rows(kuiper_p=0.01, wasted_effort_ratio=1.8), "bm25")
    assert claim["verdict"] == untestable + "accuracy falls as steps rise within the row"
    assert "Humans achieve a Kuiper statistic of 14.6" in claim["quote"] and "human" in claim["condition"]
    for figures in ({"kuiper_p": 0.01, "wasted_effort_ratio": 0.7}, {"kuiper_p": 0.3, "wasted_effort_ratio": 1.8}):
        assert results.effort_claim(rows(**figures), "bm25")["verdict"] == (
            untestable + "no dependence on steps shown within the row at n = 50")
    assert results.effort_claim(rows(kuiper_p=None, kuiper=None), "bm25")["verdict"].startswith("not testable")
    assert results.effort_claim([], "bm25")["verdict"].startswith("not tested yet")


def test_a_fresh_checkout_resumes_from_the_archive_and_never_reruns_a_complete_row(tmp_path, tiny_table,
                                                                                   monkeypatch):
    """Run directories are lost with the machine; the archive brings them back: complete rows are not run
    again, and a partial row resumes from its archived predictions with its earlier segment kept."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    (run / "trajectories.jsonl").write_text(json.dumps({"id": "q1", "out": str(run)}) + "\n")
    partial = _store_run(root, "sample", "b-run", ["48,250", "nobody", "unknown"])
    (partial / "predictions.jsonl").write_text((partial / "predictions.jsonl").read_text().splitlines()[0] + "\n")
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    questions = (root / "sample" / "questions.jsonl").read_bytes()
    import shutil
    shutil.rmtree(root)
    fresh = tmp_path / "elsewhere" / "runs"  # another machine's path
    (fresh / "sample").mkdir(parents=True)
    (fresh / "sample" / "questions.jsonl").write_bytes(questions)
    monkeypatch.setattr(results, "prepare_suite", lambda r, s: (r / s / "questions.jsonl", r / f"{s}-corpus"))
    calls = []
    monkeypatch.setattr(results, "_call", lambda args, log=None, tick=None: calls.append(args))
    a, b, _c = tiny_table.rows

    results.run_row(tiny_table, a, fresh, 1, docs / "runs")
    assert calls == []  # complete in the archive: not run
    restored = fresh / "runs" / "sample-a-run"
    meta = json.loads((restored / "run.json").read_text())
    assert meta["questions"] == str((fresh / "sample" / "questions.jsonl").resolve())
    assert json.loads((restored / "trajectories.jsonl").read_text())["out"] == str(fresh.resolve() / "runs" / "sample-a-run")

    results.run_row(tiny_table, b, fresh, 1, docs / "runs")
    (command,) = calls  # partial: resumed into the restored directory
    assert command[command.index("--out") + 1] == str(fresh / "runs" / "sample-b-run")
    segments = json.loads((fresh / "runs" / "sample-b-run" / "results_row.json").read_text())["segments"]
    assert len(segments) == 2 and segments[0]["seconds"] == 12.5 and segments[1]["predictions_before"] == 1


def test_an_archive_of_other_questions_is_not_resumed(tmp_path, tiny_table, monkeypatch):
    root, docs = tmp_path / "runs", tmp_path / "docs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(QUESTIONS[0]) + "\n")
    with pytest.raises(SystemExit, match="other questions"):
        results.restore_run(docs / "runs" / "sample-a-run", tmp_path / "fresh" / "sample-a-run", tmp_path, other)


def _another_machine(tmp_path, root, monkeypatch):
    """A fresh root holding only the suite's questions, with the suite's preparation and `dossier` stubbed out."""
    fresh = tmp_path / "elsewhere"
    (fresh / "sample").mkdir(parents=True)
    (fresh / "sample" / "questions.jsonl").write_bytes((root / "sample" / "questions.jsonl").read_bytes())
    monkeypatch.setattr(results, "prepare_suite", lambda r, s: (r / s / "questions.jsonl", r / f"{s}-corpus"))
    monkeypatch.setattr(results, "_call", lambda args, log=None, tick=None: None)
    return fresh


def test_a_row_tried_without_a_finished_episode_keeps_its_time(tmp_path, tiny_table, monkeypatch):
    """A row whose run was stopped before any episode finished says so with the time spent, and that time
    survives a fresh checkout: the next try appends its segment to the archived ones."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    tried = _store_run(root, "sample", "c-run", ["x", "y", "z"])
    (tried / "predictions.jsonl").unlink()
    result = results.score_table(tiny_table, root, docs / "runs")
    assert result["rows"][2]["status"] == "started, no episode finished in 12 s (1 try)"
    assert (docs / "runs" / "sample-c-run" / "results_row.json").is_file()

    fresh = _another_machine(tmp_path, root, monkeypatch)
    results.run_row(tiny_table, tiny_table.rows[2], fresh, 1, docs / "runs")
    segments = json.loads((fresh / "runs" / "sample-c-run" / "results_row.json").read_text())["segments"]
    assert [x["seconds"] for x in segments[:1]] == [12.5] and len(segments) == 2


def test_a_running_row_checkpoints_its_time_so_a_killed_process_loses_at_most_a_tick(tmp_path, tiny_table,
                                                                                      monkeypatch):
    """The segment is written while the run goes on, marked provisional, and made final when it stops: a
    session killed mid-run (no `finally`) kept none of a 2 h 13 min segment before this."""
    root = tmp_path / "runs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    fresh = _another_machine(tmp_path, root, monkeypatch)
    state = fresh / "runs" / "sample-c-run" / "results_row.json"
    seen = []

    def dossier(args, log=None, tick=None):
        tick()
        tick()  # a second checkpoint replaces the first, never adds to it
        seen.append(json.loads(state.read_text())["segments"])

    monkeypatch.setattr(results, "_call", dossier)
    results.run_row(tiny_table, tiny_table.rows[2], fresh, 1, None)
    (during,) = seen
    assert len(during) == 1 and during[0]["provisional"] is True and during[0]["seconds"] >= 0
    (final,) = json.loads(state.read_text())["segments"]
    assert "provisional" not in final and final["started"] == during[0]["started"]


def test_the_runner_ticks_while_its_child_runs():
    ticks = []
    results._call([sys.executable, "-c", "import time; time.sleep(0.6)"], tick=lambda: ticks.append(1), every=0.1)
    assert len(ticks) >= 2
    with pytest.raises(SystemExit, match="exit status 3"):
        results._call([sys.executable, "-c", "raise SystemExit(3)"])


def test_the_turns_of_episodes_in_flight_are_archived_and_come_back_with_the_row(tmp_path, tiny_table, monkeypatch):
    """A row stopped before any episode finished keeps its episodes' recorded turns in the archive, so a fresh
    checkout's run replays them; once those episodes finish the archive drops them."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    tried = _store_run(root, "sample", "c-run", ["x", "y", "z"])
    (tried / "predictions.jsonl").unlink()
    turn = {"id": "q1", "episode": "q1", "turn": 0, "text": "{}", "token_ids": [1, 2], "tokens": {}, "model_s": 1.0,
            "note": str(tried)}
    (tried / "turns.jsonl").write_text(json.dumps(turn) + "\n")
    result = results.score_table(tiny_table, root, docs / "runs")
    assert result["rows"][2]["status"].startswith("started, no episode finished")
    assert str(root).encode() not in (docs / "runs" / "sample-c-run" / "turns.jsonl.gz").read_bytes()

    fresh = _another_machine(tmp_path, root, monkeypatch)
    results.run_row(tiny_table, tiny_table.rows[2], fresh, 1, docs / "runs")
    back = fresh / "runs" / "sample-c-run"
    assert json.loads((back / "turns.jsonl").read_text()) == turn | {"note": str(fresh.resolve() / "runs" / "sample-c-run")}
    assert [x["seconds"] for x in json.loads((back / "results_row.json").read_text())["segments"]][:1] == [12.5]

    (back / "turns.jsonl").unlink()  # the resumed run finished those episodes
    (back / "predictions.jsonl").write_text((tried.parent / "sample-a-run" / "predictions.jsonl").read_text())
    results.score_table(tiny_table, fresh, docs / "runs")
    assert not (docs / "runs" / "sample-c-run" / "turns.jsonl.gz").exists()


def test_a_row_that_never_searches_has_no_first_query_hit():
    first = {"steps": {"first_query": {"page_hit_rate": 0.0}}}
    never = results.row_figures([], first | {"behaviour": {"searches_per_question": 0.0}}, "correct")
    searched = results.row_figures([], first | {"behaviour": {"searches_per_question": 2.5}}, "correct")
    assert (never["first_query_page_hit"], searched["first_query_page_hit"]) == (None, 0.0)
    assert results_common._pct(never["first_query_page_hit"]) == "–"


def test_the_archived_runs_hold_no_machine_path():
    """archive_run writes `runs/results/...` for the root a run was made under; a run archived from a copy under
    another root kept its machine path (seen 2026-12-06: nine run.json files with /tmp/...). Every path-like
    value of every archived run.json must be relative."""
    from pathlib import Path

    runs = Path(__file__).resolve().parents[1] / "docs" / "results" / "runs"

    def strings(value):
        if isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)
        elif isinstance(value, str):
            yield value

    found = [(path.parent.name, text) for path in sorted(runs.glob("*/run.json"))
             for text in strings(json.loads(path.read_text())) if text.startswith(("/tmp/", "/home/", "/root/", "/work/"))]
    assert not found, found[:5]
