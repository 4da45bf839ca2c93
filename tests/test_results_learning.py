"""scripts/results_learning.py: the learning-from-trajectories table resumes, archives no machine path,
re-scores from its archive alone, and reads the claim's verdict off an exact McNemar test."""

import json

import pytest

from tests.scripts import load_script

results = load_script("results")
learning = load_script("results_learning")

N = 10  # held-out questions in the hand-made split


def _questions():
    return [{"id": f"h{i}", "question": f"What was item {i}?", "answer_variants": [[f"{i}00"]],
             "evidence": [{"document": f"doc{i % 3}", "page": i + 1}]} for i in range(N)]


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))


def _hits_report(root, base_hits, tuned_hits):
    """What `dossier retrieval-eval --model --adapter --format json` prints, for per-question hit lists."""
    def system(label, hits):
        return {"system": label, "mode": "boolean", "k": 5, "questions": N, "page_hit": round(sum(hits) / N, 4),
                "doc_hit": 0.5, "without_query": 1, "query_errors": 0,
                "per_question": {f"h{i}": float(h) for i, h in enumerate(hits)},
                "queries": {f"h{i}": f"item {i}" for i in range(N)}}
    return {"systems": [system("qwen2.5-1.5b", base_hits),
                        system(f"qwen2.5-1.5b + {root}/learning/adapter", tuned_hits)], "paired": None}


def _card(root):
    return {"out": str(root / "learning" / "adapter"), "base_model": "qwen2.5-1.5b",
            "data": {"runs": [str(root / "learning" / "silver")], "episodes_by_source": {"silver": 66},
                     "pairs_by_source": {"silver": 66}, "filters": {"silver_variants": 1, "sources": ["silver"]},
                     "split": {"seed": 0, "heldout_share": 0.0, "train_pairs": 66, "heldout_pairs": 0}},
            "agent": {"k": 5}, "lora": {"top_layers": 4, "batch_size": 2, "grad_accum": 1, "max_steps": -1, "epochs": 2.0,
                                        "learning_rate": 0.001, "bf16": True},
            "training": {"steps": 66, "seconds": 1234.5, "device": "cpu", "peak_rss_mib": 4527.2,
                         "train_losses": [{"step": 1, "loss": 3.05}, {"step": 24, "loss": 2.43}], "eval_losses": [],
                         "initial_eval_loss": None, "trainable_parameters": 1000, "total_parameters": 1_500_000}}


def make_root(root, base_hits=(1, 1, 0, 0, 0, 0, 0, 0, 0, 0), tuned_hits=(1, 1, 1, 1, 1, 1, 1, 1, 1, 0)):
    """The files steps 1-4 leave under the runs root, hand-made (no model run)."""
    questions = _questions()
    _write(root / "learning/split/heldout.jsonl", "".join(json.dumps(q) + "\n" for q in questions))
    _write(root / "learning/split/train.jsonl", "")
    _write(root / "learning/split/split.json", {
        "questions": str(root / "financebench" / "questions.jsonl"), "seed": 0, "heldout_share": 0.3,
        "train": {"questions": 69, "documents": 41}, "heldout": {"questions": N, "documents": 3},
        "train_ids": ["t1"], "heldout_ids": [q["id"] for q in questions]})
    _write(root / "learning/silver/run.json", {"agent": "silver", "corpus": str(root / "financebench-corpus")})
    _write(root / "learning/silver/run_summary.json", {
        "questions": 69, "mined": 66, "without_query": 3, "queries_kept": 318, "best_rank_1": 39,
        "best_rank_2_to_k": 27, "seconds": 34.7, "out": str(root / "learning" / "silver")})
    _write(root / "learning/silver/trajectories.jsonl", "{}\n")  # the silver corpus: never archived
    card = _card(root)
    _write(root / "learning/train.json", card)
    _write(root / "learning/adapter/card.json", {k: v for k, v in card.items() if k != "out"})
    _write(root / "learning/adapter/README.md", f"# adapter\n- trajectories: {root}/learning/silver\n")
    _write(root / "learning/adapter/adapter_model.safetensors", "weights")
    _write(root / "learning/adapter/adapter_config.json", {"r": 16, "lora_alpha": 32,
                                                           "base_model_name_or_path": str(root / "cache" / "qwen")})
    _write(root / "learning/heldout-hits.json", _hits_report(root, base_hits, tuned_hits))
    return root


def _store_run(root, name, answers, first_hits=None, later_hits=None):
    """A finished `dossier run` directory on the held-out questions; with hit lists, trajectories of two
    searches a question (each returns the gold page where its list says 1, another page where 0)."""
    run = root / "runs" / f"learning-{name}"
    _write(run / "run.json", {"agent": "bm25", "model": "qwen2.5-1.5b", "engine": {"cpu_threads": 1},
                              "questions": str(root / "learning/split/heldout.jsonl")})
    lines = [{"id": q["id"], "question": q["question"], "answer": [a], "citations": [q["evidence"][0]],
              "iterations": 1} for q, a in zip(_questions(), answers)]
    _write(run / "predictions.jsonl", "".join(json.dumps(p) + "\n" for p in lines))
    if first_hits is None:
        return
    episodes = []
    for q, first, later in zip(_questions(), first_hits, later_hits):
        gold, other = q["evidence"][0], {"document": "doc9", "page": 99}
        searches = [{"tool_call": {"name": "search", "arguments": {"query": f"search {n}"}},
                     "tool_result": {"pages": [gold if hit else other]}} for n, hit in enumerate((first, later))]
        episodes.append({"id": q["id"], "question": q["question"], "steps": [*searches, {
            "tool_call": {"name": "answer", "arguments": {"answer": "x", "citations": []}}}]})
    _write(run / "trajectories.jsonl", "".join(json.dumps(e) + "\n" for e in episodes))


def _table(tmp_path, **hits):
    root, docs = make_root(tmp_path / "runs" / "results", **hits), tmp_path / "docs"
    assert learning.main(root, docs, docs / "runs", score_only=True) == 0
    return root, docs, json.loads((docs / "learning-financebench.json").read_text())


def test_headline_is_recomputed_from_the_per_question_hits(tmp_path):
    _root, docs, result = _table(tmp_path)
    first = result["first_query"]
    assert first["base"]["hits"] == 2 and first["tuned"]["hits"] == 9 and first["n"] == N
    assert first["only_tuned"] == 7 and first["only_base"] == 0
    assert first["mcnemar_p"] == pytest.approx(2 / 2 ** 7, abs=1e-4)
    assert result["claims"][0]["verdict"] == "reproduced"
    assert result["training"]["peak_rss_mib"] == 4527.2 and result["notes"] == []
    markdown = (docs / "learning-financebench.md").read_text()
    assert "2/10 = 20.0 %" in markdown and "9/10 = 90.0 %" in markdown and "**reproduced**" in markdown
    assert "at least 6 discordant questions" in markdown and "1234.5 s" in markdown and "4527 MiB" in markdown
    assert "runs/results/learning/adapter --heldout-share 0" in markdown  # the exact command, no machine path
    assert "not run yet" in markdown  # the bm25 rows
    assert "not timed by this script (its own report: 35 s)" in markdown  # mine, run by hand
    assert "(its own report: 1234 s, model loading excluded)" in markdown  # train


@pytest.mark.parametrize("base_hits, tuned_hits, verdict", [
    ((0,) * 10, (1,) * 7 + (0,) * 3, "reproduced"),
    ((1,) * 7 + (0,) * 3, (0,) * 10, "not reproduced (the opposite is significant)"),
    ((1, 1, 0, 0, 0, 0, 0, 0, 0, 0), (1, 1, 1, 1, 1, 0, 0, 0, 0, 0), "inconclusive at n = 10"),  # 3 discordant
    ((1,) * 6 + (0,) * 4, (0,) * 6 + (1,) * 4, "inconclusive at n = 10"),  # 6 vs 4: many discordant, both ways
])
def test_the_claim_verdict_follows_exact_mcnemar(tmp_path, base_hits, tuned_hits, verdict):
    _root, _docs, result = _table(tmp_path, base_hits=base_hits, tuned_hits=tuned_hits)
    assert result["claims"][0]["verdict"] == verdict


def test_the_archive_holds_no_machine_path_and_keeps_the_adapter(tmp_path):
    root, docs, _result = _table(tmp_path)
    archived = docs / "runs" / "learning-financebench"
    files = sorted(str(p.relative_to(archived)) for p in archived.rglob("*") if p.is_file())
    assert files == ["adapter/README.md", "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
                     "adapter/card.json", "heldout-hits.json", "heldout/questions.jsonl", "silver/run.json",
                     "silver/summary.json", "split.json", "train.json"]  # never the silver corpus text
    for name in files:
        assert str(tmp_path) not in (archived / name).read_text(), name
    assert json.loads((archived / "split.json").read_text())["questions"] == "runs/results/financebench/questions.jsonl"
    assert str(tmp_path) not in (docs / "learning-financebench.json").read_text()
    assert str(tmp_path) not in (docs / "learning-financebench.md").read_text()


def test_check_rescores_the_archive_alone_and_fails_on_an_edited_figure(tmp_path, capsys):
    import shutil

    root, docs, _result = _table(tmp_path)
    shutil.rmtree(root)  # a clean checkout: only the archive in the repository
    capsys.readouterr()
    assert results.main(["learning-financebench", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    assert "9/10 = 90.0 %" in out and "re-scores to the same figures" in out

    stored = json.loads((docs / "learning-financebench.json").read_text())
    stored["first_query"]["tuned"]["hits"] = 10  # a figure edited by hand
    (docs / "learning-financebench.json").write_text(json.dumps(stored))
    assert results.main(["learning-financebench", "--check", "--root", str(root), "--docs", str(docs)]) == 1
    assert "differ for first_query" in capsys.readouterr().out


def test_check_fails_when_the_archived_hits_change(tmp_path, capsys):
    _root, docs, _result = _table(tmp_path)
    path = docs / "runs" / "learning-financebench" / "heldout-hits.json"
    report = json.loads(path.read_text())
    report["systems"][1]["per_question"]["h9"] = 1.0
    path.write_text(json.dumps(report))
    assert learning.main(tmp_path / "nowhere", docs, docs / "runs", check_only=True) == 1
    assert "differ for first_query" in capsys.readouterr().out


def test_a_card_that_disagrees_with_the_written_command_is_said(tmp_path):
    root = make_root(tmp_path / "runs" / "results")
    card = json.loads((root / "learning/train.json").read_text())
    card["lora"]["epochs"] = 3.0
    (root / "learning/train.json").write_text(json.dumps(card))
    learning.main(root, tmp_path / "docs", tmp_path / "docs" / "runs", score_only=True)
    assert "--epochs is 2 here but 3.0 in the adapter's card" in (tmp_path / "docs/learning-financebench.md").read_text()


def test_whole_runs_are_scored_and_compared_when_archived(tmp_path):
    root = make_root(tmp_path / "runs" / "results")
    _store_run(root, "bm25-base", ["000", "nothing", *["x"] * 8])
    _store_run(root, "bm25-tuned", ["000", "nothing", "200", "300", *["x"] * 6])
    docs = tmp_path / "docs"
    learning.main(root, docs, docs / "runs", score_only=True)
    result = json.loads((docs / "learning-financebench.json").read_text())
    base_row, tuned_row, first_row, stop_row = result["runs"]
    assert stop_row["status"] == first_row["status"] == "not run yet"  # each its own row, compared with base when run
    assert base_row["figures"]["correct"] == 1 and tuned_row["figures"]["correct"] == 3
    assert tuned_row["vs_reference"]["only_a_correct"] == 2 and tuned_row["vs_reference"]["only_b_correct"] == 0
    assert result["gold_within_budget"] is None  # no trajectories: nothing said about searches
    archived = docs / "runs" / "learning-financebench" / "learning-bm25-base"
    assert json.loads((archived / "run.json").read_text())["questions"] == "../heldout/questions.jsonl"
    markdown = (docs / "learning-financebench.md").read_text()
    assert "3/10 = 30.0 %" in markdown and "| not timed | complete |" in markdown  # run by hand, no summary
    assert "--out runs/results/runs/learning-bm25-base --threads 1 --format json`" in markdown  # as it ran
    assert learning.main(root, docs, docs / "runs", check_only=True) == 0


def test_a_finished_step_is_skipped_and_a_new_one_is_run_and_timed(tmp_path, monkeypatch):
    root = make_root(tmp_path / "runs" / "results")
    (root / "learning/heldout-hits.json").write_text("")  # a shell redirect of a command still running
    calls = []

    def fake_run(args, stdout, stderr):
        calls.append(args[3:5])
        stdout.write(json.dumps(_hits_report(root, (0,) * N, (1,) * N)))
        return 0

    monkeypatch.setattr(learning, "_execute", fake_run)
    steps = {s.name: s for s in learning.STEPS}
    for name in ("split", "mine", "train"):
        learning.run_step(steps[name], root, threads=2)
    assert calls == []  # their outputs exist
    learning.run_step(steps["heldout-hits"], root, threads=2)
    assert calls == [["retrieval-eval", "--corpus"]]
    assert len(json.loads((root / "learning/heldout-hits.json").read_text())["systems"]) == 2
    learning.run_step(steps["heldout-hits"], root, threads=2)
    assert len(calls) == 1  # now finished: skipped
    record = json.loads((root / "learning/steps.json").read_text())["heldout-hits"]
    (segment,) = record["segments"]
    assert segment["exit_status"] == 0 and segment["seconds"] >= 0 and len(segment["load_end"]) == 3
    assert record["command"].startswith("dossier retrieval-eval --corpus runs/results/financebench-corpus")


def test_a_failed_step_is_not_done_and_keeps_its_segment(tmp_path, monkeypatch):
    root = make_root(tmp_path / "runs" / "results")
    (root / "learning/heldout-hits.json").unlink()

    def fail(args, stdout, stderr):
        stdout.write("{")
        return 3

    monkeypatch.setattr(learning, "_execute", fail)
    step = next(s for s in learning.STEPS if s.name == "heldout-hits")
    with pytest.raises(SystemExit, match="exit status 3"):
        learning.run_step(step, root, threads=2)
    assert not learning.step_done(step, root) and not (root / "learning/heldout-hits.json").exists()
    assert json.loads((root / "learning/steps.json").read_text())["heldout-hits"]["segments"][0]["exit_status"] == 3


def test_the_table_is_listed_beside_the_others(capsys):
    assert results.main(["learning-financebench", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("learning-financebench:") and "dossier train queries -t runs/results/learning/silver" in out
    assert "madqa-sample" not in out


def test_gold_within_budget_is_compared_from_the_runs_trajectories(tmp_path):
    root = make_root(tmp_path / "runs" / "results")
    _store_run(root, "bm25-base", ["x"] * N, first_hits=[0] * N, later_hits=[1, 1, 1] + [0] * 7)
    _store_run(root, "bm25-tuned", ["x"] * N, first_hits=[1] * 6 + [0] * 4, later_hits=[0] * N)
    _store_run(root, "bm25-tuned-first", ["x"] * N, first_hits=[1] * 2 + [0] * 8, later_hits=[0] * 9 + [1])
    docs = tmp_path / "docs"
    learning.main(root, docs, docs / "runs", score_only=True)
    result = json.loads((docs / "learning-financebench.json").read_text())
    budget, first_turn = result["gold_within_budget"], result["gold_within_budget_first_turn"]
    assert first_turn["first_hit"]["tuned"]["hits"] == 2 and first_turn["hit_within_budget"]["tuned"]["hits"] == 3
    assert budget["n"] == N
    assert budget["first_hit"]["base"]["hits"] == 0 and budget["first_hit"]["tuned"]["hits"] == 6
    assert budget["hit_within_budget"]["base"]["hits"] == 3 and budget["hit_within_budget"]["tuned"]["hits"] == 6
    assert budget["hit_within_budget"]["only_tuned"] == 3 and budget["hit_within_budget"]["only_base"] == 0
    markdown = (docs / "learning-financebench.md").read_text()
    assert "a gold page found within the run's budget: base 3/10 = 30.0 %" in markdown
    assert "first search hit a gold page: base 0/10 = 0.0 % [0.0, 27.8] -> first turn tuned 2/10" in markdown
    archived = docs / "runs" / "learning-financebench" / "learning-bm25-tuned"
    assert (archived / "trajectories.jsonl.gz").is_file()
    assert learning.main(tmp_path / "nowhere", docs, docs / "runs", check_only=True) == 0


def test_the_stop_rule_fit_is_read_from_train_stops_json():
    fit = {"kind": "logistic", "threshold": 0.15667, "train": {
        "episodes": 68, "searches": 499, "label_wont_help": 495, "auc": 0.96464,
        "simulation": {"searches_per_question": 7.3382, "searches_per_question_with_rule": 1.7206, "gold_pages_lost": 0}}}
    stop = learning.stop_figures(fit)
    assert stop == {"kind": "logistic", "threshold": 0.1567, "episodes": 68, "searches": 499, "wont_help": 495,
                    "auc": 0.9646, "searches_per_question": 7.3382, "searches_per_question_with_rule": 1.7206,
                    "gold_pages_lost": 0}
    assert learning.stop_figures(None) is None
    assert [s.name for s in learning.STEPS][-2:] == ["stop", "bm25-stop"]
    stop_step = learning.STEPS[-2]
    assert "--questions" in stop_step.args and stop_step.args[stop_step.args.index("--questions") + 1].endswith(
        "learning/split/train.jsonl")  # fitted on training questions only, never the held-out ones


def _fresh_checkout(tmp_path, keep_weights=True):
    """A table archived from one root, then a new root on 'another machine' holding only the split."""
    root = make_root(tmp_path / "runs" / "results")
    _store_run(root, "bm25-base", ["000", "nothing", *["x"] * 8])
    _store_run(root, "bm25-tuned", ["000", "nothing", "200", "300", *["x"] * 6])
    def segment(seconds):
        return {"started": "2026-12-02T05:00:00", "seconds": seconds, "load_start": [1.0, 1.0, 1.0],
                "load_end": [1.0, 1.0, 1.0], "cores": 2, "commit": "abc", "exit_status": 0}
    steps = {"bm25-base": {"command": "dossier run ...", "segments": [segment(699.4)]},
             "train": {"command": "dossier train queries ...", "segments": [segment(2318.0)]}}
    _write(root / "learning/steps.json", steps)
    docs = tmp_path / "docs"
    learning.main(root, docs, docs / "runs", score_only=True)
    archived = docs / "runs" / "learning-financebench"
    if not keep_weights:
        (archived / "adapter" / "adapter_model.safetensors").unlink()
    _write(archived / "stop.json", {"features": ["rank"], "trajectories": ["runs/results/runs/x"]})
    _write(archived / "stop-fit.json", {"out": "runs/results/learning/stop.json"})
    fresh = tmp_path / "elsewhere" / "runs"
    _write(fresh / learning.HELDOUT, (root / learning.HELDOUT).read_text())
    return fresh, docs / "runs"


def test_a_fresh_checkout_restores_the_archived_steps_instead_of_running_them(tmp_path):
    fresh, archive = _fresh_checkout(tmp_path)
    restored = learning.restore_learning(fresh, archive)
    assert restored == ["train", "heldout-hits", "stop", "bm25-base", "bm25-tuned"]
    steps = {s.name: s for s in learning.STEPS}
    for name in restored:
        assert learning.step_done(steps[name], fresh), name
    assert not learning.step_done(steps["bm25-stop"], fresh)  # never archived: it runs
    assert (fresh / "learning/adapter/adapter_model.safetensors").read_text() == "weights"
    assert json.loads((fresh / "learning/stop-fit.json").read_text())["out"] == f"{fresh.resolve()}/learning/stop.json"
    hits = json.loads((fresh / "learning/heldout-hits.json").read_text())
    assert hits["systems"][1]["system"] == f"qwen2.5-1.5b + {fresh.resolve()}/learning/adapter"
    run = json.loads((fresh / "runs/learning-bm25-base/run.json").read_text())
    assert run["questions"] == str((fresh / learning.HELDOUT).resolve())
    record = json.loads((fresh / "learning/steps.json").read_text())
    assert [x["seconds"] for x in record["bm25-base"]["segments"]] == [699.4] and "train" in record


def test_without_archived_weights_the_adapter_and_what_used_it_run_again(tmp_path):
    fresh, archive = _fresh_checkout(tmp_path, keep_weights=False)
    assert learning.restore_learning(fresh, archive) == ["stop", "bm25-base"]  # the tuned run: the old adapter's
    assert not (fresh / "learning/adapter").exists() and not (fresh / "learning/heldout-hits.json").exists()
    assert "train" not in json.loads((fresh / "learning/steps.json").read_text())  # its time is the old adapter's


def test_other_held_out_questions_are_not_restored(tmp_path):
    fresh, archive = _fresh_checkout(tmp_path)
    _write(fresh / learning.HELDOUT, json.dumps(_questions()[0]) + "\n")
    with pytest.raises(SystemExit, match="differ"):
        learning.restore_learning(fresh, archive)


def test_a_run_tried_afresh_keeps_the_archived_tries_time_and_each_try_its_command(tmp_path, monkeypatch):
    root = make_root(tmp_path / "runs" / "results")
    docs = tmp_path / "docs"
    earlier = {"started": "2026-12-01T10:00:00", "seconds": 1134.4, "load_start": [1, 1, 1], "load_end": [1, 1, 1],
               "cores": 2, "commit": "abc", "exit_status": -15}
    _write(docs / "runs" / learning.NAME / "steps.json",
           {"bm25-tuned": {"command": "dossier run --old-flags", "segments": [earlier]}})
    monkeypatch.setattr(learning, "_execute", lambda args, stdout, stderr: -15)  # stopped again, none finished
    step = next(s for s in learning.STEPS if s.name == "bm25-tuned")
    with pytest.raises(SystemExit):
        learning.run_step(step, root, threads=2)
    assert learning.main(root, docs, docs / "runs", score_only=True) == 0
    record = json.loads((docs / "runs" / learning.NAME / "steps.json").read_text())["bm25-tuned"]
    first, second = record["segments"]
    assert first["seconds"] == 1134.4 and first["command"] == "dossier run --old-flags"
    assert "--kv-cache-gib 6" in second["command"] and record["command"] == second["command"]
    table = json.loads((docs / "learning-financebench.json").read_text())
    row = next(r for r in table["runs"] if r["name"] == "bm25-tuned")
    assert row["status"].startswith("started, no episode finished in") and "(2 tries)" in row["status"]
    assert learning.main(root, docs, docs / "runs", score_only=True) == 0  # archiving again adds nothing twice
    assert len(json.loads((docs / "runs" / learning.NAME / "steps.json").read_text())["bm25-tuned"]["segments"]) == 2
