"""Run files never lose finished work: cut at every byte offset of their last two records, they resume
without a traceback and lose only the torn record (issue 26, item 14)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.run_dir import (PREDICTIONS, TRAJECTORIES, append_record, check_resume, commit_episode,
                                   finished_ids, read_records, repair_tail)
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets.formats import Evidence, Question
from engine.studio.annotator import AnnotatorRun
from tests.agents.scripted import build_corpus, search_then_answer
from tools.errors import DossierError

# multi-byte characters in every record, so some cuts fall inside a character
QUESTIONS = [Question(f"q{i}", f"Revenue in 2019, in € (café n°{i})?", [["$48,250"]], [Evidence("report", 1)])
             for i in range(1, 5)]


def _records(qid: str) -> tuple[dict, dict]:
    trajectory = {"id": qid, "question": f"Quel est le chiffre d'affaires € {qid}?", "steps": [{"step": 1}],
                  "final": {"answer": ["48 250 €"], "reason": "answered"}}
    return trajectory, {"id": qid, "question": "…", "answer": ["48 250 €"], "citations": []}


def _last_two_starts(path) -> list[int]:
    data = path.read_bytes()
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    return [0, *ends][-3:-1]  # where the second-to-last and the last record begin


def _ids(path) -> list[str]:
    return [r["id"] for r in read_records(path)]


def test_append_after_a_cut_at_every_byte_offset_keeps_every_whole_record(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    for qid in ("q1", "q2", "q3"):
        commit_episode(base, *_records(qid))
    for name in (PREDICTIONS, TRAJECTORIES):
        full = (base / name).read_bytes()
        first = _last_two_starts(base / name)[0]
        line_ends = [i + 1 for i, byte in enumerate(full) if byte == ord("\n")]
        for cut in range(first, len(full) + 1):
            run = tmp_path / f"{name}-{cut}"
            shutil.copytree(base, run)
            with open(run / name, "r+b") as fh:
                fh.truncate(cut)
            whole = sum(end <= cut for end in line_ends)
            if cut and full[cut - 1:cut] == b"}" and cut + 1 in line_ends:
                whole += 1  # the record is whole, only its newline was cut: it is kept
            done = finished_ids(run)
            expected = ["q1", "q2", "q3"][:whole]
            if name == PREDICTIONS:
                assert done == set(expected), f"cut at byte {cut}"
            commit_episode(run, *_records("q4"))
            assert _ids(run / name) == [*expected, "q4"], f"{name} cut at byte {cut}"
            assert all(line.endswith(b"}") for line in (run / name).read_bytes().splitlines()), cut
            shutil.rmtree(run)


def test_a_real_run_cut_at_every_byte_offset_resumes_and_reruns_only_the_torn_episodes(tmp_path):
    corpus = build_corpus(tmp_path / "c")
    env = AgentEnv(corpus)
    base = tmp_path / "base"
    RolloutRunner(ScriptedBackend(search_then_answer), AgentSettings(), env, base, concurrency=1).run(QUESTIONS)
    predictions = (base / PREDICTIONS).read_bytes()
    line_ends = [i + 1 for i, byte in enumerate(predictions) if byte == ord("\n")]
    first = _last_two_starts(base / PREDICTIONS)[0]
    for cut in range(first, len(predictions) + 1):
        run = tmp_path / f"run-{cut}"
        shutil.copytree(base, run)
        with open(run / PREDICTIONS, "r+b") as fh:
            fh.truncate(cut)  # the trajectories of these episodes were written before their predictions
        kept = (run / PREDICTIONS).read_bytes()[: max([e for e in line_ends if e <= cut], default=0)]
        summary = RolloutRunner(ScriptedBackend(search_then_answer), AgentSettings(), env, run,
                                concurrency=1).run(QUESTIONS)
        assert summary.episodes + summary.skipped == 4 and summary.episodes <= 2, cut
        ids = _ids(run / PREDICTIONS)
        assert sorted(ids) == ["q1", "q2", "q3", "q4"], f"cut at byte {cut}: {ids}"
        assert (run / PREDICTIONS).read_bytes().startswith(kept)  # finished records stay as they were
        assert sorted(_ids(run / TRAJECTORIES)) == ["q1", "q2", "q3", "q4"], cut  # one per prediction
        shutil.rmtree(run)


def test_invalid_utf8_and_glued_lines_are_skipped_with_a_warning_naming_file_and_line(tmp_path, caplog):
    path = tmp_path / PREDICTIONS
    append_record(path, {"id": "q1"})
    with open(path, "ab") as fh:
        fh.write(b'{"id": "q2", "answer": "caf\xc3')  # cut inside the two bytes of "\xe9"
        fh.write(b'{"id": "q3"}\n')  # glued on by a writer that did not repair the tail
        fh.write(b'{"id": "q4", "note": "\xe9t\xe9"}\n')  # Latin-1, not UTF-8
    append_record(path, {"id": "q5"})
    with caplog.at_level(logging.WARNING):
        assert _ids(path) == ["q1", "q5"]
    assert f"{path}:2:" in caplog.text and f"{path}:3:" in caplog.text and "not UTF-8" in caplog.text
    assert finished_ids(tmp_path) == {"q1", "q5"}


def test_a_whole_record_missing_only_its_newline_is_completed_not_cut(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"id": "q1"}\n{"id": "q2"}')
    assert repair_tail(path) == 0 and path.read_bytes() == b'{"id": "q1"}\n{"id": "q2"}\n'
    path.write_bytes(b'{"id": "q1"}\n{"id": "q2"')
    assert repair_tail(path) == len(b'{"id": "q2"') and path.read_bytes() == b'{"id": "q1"}\n'


def test_a_lone_surrogate_is_written_as_a_json_escape_and_read_back(tmp_path):
    append_record(tmp_path / "p.jsonl", {"id": "q1", "answer": "bad \ud800 text"})
    assert read_records(tmp_path / "p.jsonl") == [{"id": "q1", "answer": "bad \ud800 text"}]


def test_resume_check_names_the_differing_fields_and_an_unreadable_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"agent": "bm25", "model": "a"}))
    assert check_resume(tmp_path, {"agent": "bm25", "model": "a"}, ("agent", "model"), "use another --out")
    with pytest.raises(DossierError, match="different model; use another --out"):
        check_resume(tmp_path, {"agent": "bm25", "model": "b"}, ("agent", "model"), "use another --out")
    (tmp_path / "run.json").write_bytes(b'{"agent": "bm')
    with pytest.raises(DossierError, match="run.json is not readable JSON"):
        check_resume(tmp_path, {}, ("agent",), "use another --out")


STUDIO_META = {"agent": "human", "model": "human", "questions": "/q.jsonl", "corpus": "/c", "settings": {"k": 5},
               "seed": None}


def test_the_studio_journal_cut_at_every_byte_offset_reopens_and_loses_only_the_torn_event(tmp_path):
    base = tmp_path / "ana"
    run = AnnotatorRun(base, "Ana", QUESTIONS[:2], STUDIO_META)
    run.present()
    run.record("q1", "search", query="chiffre d'affaires €", pages=[], error=None, server_s=0.001)
    run.record("q1", "view", document="report", page=1, via="result")
    journal = (base / "events.jsonl").read_bytes()
    line_ends = [i + 1 for i, byte in enumerate(journal) if byte == ord("\n")]
    for cut in range(_last_two_starts(base / "events.jsonl")[0], len(journal) + 1):
        copy = tmp_path / f"ana-{cut}"
        shutil.copytree(base, copy)
        with open(copy / "events.jsonl", "r+b") as fh:
            fh.truncate(cut)
        whole = sum(end <= cut for end in line_ends) + (cut + 1 in line_ends)
        reopened = AnnotatorRun(copy, "Ana", QUESTIONS[:2], STUDIO_META)
        assert len(reopened.question_events("q1")) == whole, cut
        reopened.record("q1", "view", document="report", page=2, via="next")
        assert len(read_records(copy / "events.jsonl")) == whole + 1, cut
        shutil.rmtree(copy)
