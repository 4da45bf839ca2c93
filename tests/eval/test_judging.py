"""MADQA's judge over a run: which items reach it, batching on the engine, the cache, resuming, the headline."""

import json
import subprocess
import sys

import pytest

from engine.datasets.judge_labels import SAMPLE_JUDGE_LABELS
from engine.eval.judge import Verdict, semantic_score
from engine.eval.judging import BatchedJudge, JudgeCache, JudgeItem, items_to_judge, prejudge
from engine.eval.metrics.anls import ANLSScorer
from engine.datasets.formats import Prediction, Question
from tests.conftest import ROOT

GOLD = [["$48,250"], ["48,250"]]


class FakeBatched(BatchedJudge):
    """A BatchedJudge whose 'engine' answers from a table; it can fail after some verdicts (a killed run)."""

    def __init__(self, verdicts, fail_after=None):
        super().__init__("fake-judge")
        self.verdicts, self.fail_after, self.batches = verdicts, fail_after, []

    def judge_all(self, items, on_verdict):
        self.batches.append(len(items))
        for n, item in enumerate(items):
            if self.fail_after is not None and n == self.fail_after:
                raise KeyboardInterrupt
            on_verdict(item, Verdict(self.verdicts.get(item.answer, "incorrect")), "{}")


def _questions():
    return [Question(id="q1", question="Revenue in 2023?", answer_variants=GOLD, evidence=[]),
            Question(id="q2", question="Who signed?", answer_variants=[["Helen Marsh"]], evidence=[]),
            Question(id="q3", question="Fee?", answer_variants=[["$12.50"]], evidence=[])]


def _predictions():
    return [Prediction(id="q1", question="Revenue in 2023?", answer=["48,250 thousand dollars"], citations=[]),
            Prediction(id="q2", question="Who signed?", answer=["Helen Marsh"], citations=[]),  # exact: no judge call
            Prediction(id="q3", question="Fee?", answer=["I cannot find it"], citations=[])]  # refusal: no judge call


def test_only_items_the_two_stage_rule_sends_to_the_judge_are_judged():
    asked = items_to_judge(_questions(), _predictions())
    assert [item.answer for item in asked] == [("48,250 thousand dollars",)]


def test_cache_makes_the_second_call_judge_nothing_and_a_killed_call_resume(tmp_path):
    items = [JudgeItem.of("Q", GOLD, [f"answer {n}"]) for n in range(5)]
    cache_path = tmp_path / "judge_cache.jsonl"
    killed = FakeBatched({("answer 1",): "correct"}, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        prejudge(items, killed, JudgeCache(cache_path))
    assert len(cache_path.read_text().splitlines()) == 2  # each verdict was written the moment it came

    resumed = FakeBatched({("answer 1",): "correct"})
    verdict_of, stats = prejudge(items, resumed, JudgeCache(cache_path))
    assert resumed.batches == [3] and (stats.from_cache, stats.judged) == (2, 3)
    assert verdict_of("Q", GOLD, ["answer 1"]) is Verdict.correct

    again = FakeBatched({})
    _, stats = prejudge(items, again, JudgeCache(cache_path))
    assert again.batches == [] and (stats.from_cache, stats.judged) == (5, 0)


def test_a_torn_cache_line_is_judged_again(tmp_path):
    cache_path = tmp_path / "c.jsonl"
    item = JudgeItem.of("Q", GOLD, ["x"])
    cache_path.write_text(json.dumps({"key": item.key("fake-judge"), "verdict": "correct"}) + "\n" + '{"key": "ab')
    cache = JudgeCache(cache_path)
    assert cache.get(item.key("fake-judge")) is Verdict.correct and len(cache.verdicts) == 1


def test_the_prejudged_verdicts_refuse_an_item_they_never_saw(tmp_path):
    verdict_of, _ = prejudge([], FakeBatched({}), JudgeCache(None))
    with pytest.raises(Exception, match="not prejudged"):
        verdict_of("Q", GOLD, ["never seen"])


def test_shipped_labels_all_reach_the_judge_and_have_both_classes():
    scorer = ANLSScorer()
    reached = 0
    for item in SAMPLE_JUDGE_LABELS:
        anls = scorer(item["answer"], item["gold"])
        _, how = semantic_score(item["question"], item["gold"], item["answer"], exact=False, anls=anls,
                                judge=lambda *a: "correct")
        reached += how == "judge"
    assert reached == len(SAMPLE_JUDGE_LABELS) >= 40
    humans = [i["human"] for i in SAMPLE_JUDGE_LABELS]
    assert humans.count("incorrect") >= 20 and len(humans) - humans.count("incorrect") >= 20


def _dossier(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture
def tiny_run(tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": q.id, "question": q.question, "answer_variants": q.answer_variants,
                                             "evidence": []}) + "\n" for q in _questions()))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(questions)}))
    (run / "predictions.jsonl").write_text("".join(json.dumps({"id": p.id, "question": p.question,
                                                               "answer": p.answer}) + "\n" for p in _predictions()))
    return run


def test_eval_with_a_local_judge_puts_its_accuracy_first_and_reads_its_cache_the_second_time(tiny_run, tmp_path):
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"q0": 0.9, "q1": 0.95, "m0": 30, "m1": 30, "n": 60, "judge": "default"}))
    first = _dossier("eval", str(tiny_run), "--judge", "default", "--calibration", str(calibration), "--no-drift")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert "1 answers needed a judgement; 0 read from the cache, 1 judged" in first.stdout
    assert "judging with default: judging" in first.stderr  # tools/progress.py's plain line: stderr is not a terminal
    headline = next(i for i, line in enumerate(lines) if line.startswith("accuracy"))
    assert lines[headline].startswith("accuracy (judge, Rogan–Gladen corrected)")
    assert "q1 0.950, q0 0.900 from" in lines[headline] and "cal.json (60 labelled items" in lines[headline]
    assert lines[headline + 1].startswith("accuracy (ANLS* ≥ 0.5)")
    second = _dossier("eval", str(tiny_run), "--judge", "default", "--calibration", str(calibration), "--no-drift")
    assert "1 read from the cache, 0 judged" in second.stdout
    report = json.loads((tiny_run / "eval" / "report.json").read_text())
    assert report["judge"]["model"] == "default" and report["judge"]["from_cache"] == 1


def test_a_small_calibration_is_not_used_to_correct(tiny_run, tmp_path):
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"q0": 0.9, "q1": 0.95, "m0": 5, "m1": 5, "n": 10}))
    done = _dossier("eval", str(tiny_run), "--judge", "default", "--calibration", str(calibration), "--no-drift")
    assert done.returncode == 0, done.stderr
    assert "accuracy (judge, uncorrected)" in done.stdout
    assert "not corrected: the calibration has 10 labelled items (at least 20" in done.stdout


def test_a_judge_that_cannot_load_stops_before_scoring(tiny_run):
    done = _dossier("eval", str(tiny_run), "--judge", "/no/such/judge.gguf", "--no-drift")
    assert done.returncode != 0 and "/no/such/judge.gguf" in done.stderr and "Traceback" not in done.stderr
    assert not (tiny_run / "eval" / "report.json").exists()


def test_without_a_judge_the_headline_says_it_is_anls():
    done_lines = None
    from engine.eval.reports.markdown import headline_rows

    report = {"accuracy": 0.5, "accuracy_ci": [0.2, 0.8], "mean_anls": 0.5, "exact_match": 0.5,
              "exact_match_ci": [0.2, 0.8], "docvqa_accuracy": 0.5, "docvqa_accuracy_ci": [0.2, 0.8],
              "mudabench_accuracy": 0.5, "mudabench_accuracy_ci": [0.2, 0.8], "page_f1": 0, "page_precision": 0,
              "page_recall": 0, "doc_f1": 0, "doc_precision": 0, "doc_recall": 0, "kuiper": None,
              "kuiper_undefined": "x", "kuiper_n": 0, "kuiper_dropped": 0}
    done_lines = headline_rows(report)
    assert done_lines[0][0] == "accuracy (ANLS* ≥ 0.5)" and "MADQA's headline is an LLM judge" in done_lines[0][2]


def test_calibrate_judge_without_a_judge_on_the_shipped_set_says_what_to_give():
    done = _dossier("eval", "calibrate-judge")
    assert done.returncode != 0 and "give --judge MODEL" in done.stderr and "Traceback" not in done.stderr
