"""The run directory protocol, in one place: every writer of a run directory uses it.

    RUN_DIR/run.json            what ran (agent, model, questions, corpus, settings, ...), written once
    RUN_DIR/trajectories.jsonl  one line per finished episode
    RUN_DIR/predictions.jsonl   one line per finished episode: the commit marker, written last
    RUN_DIR/run_summary.json    this call's figures, earlier calls' kept under "earlier_calls"
    RUN_DIR/turns.jsonl         each model turn of an episode still in flight (its text and token ids):
                                a killed run replays them on resume instead of generating them again
    (the studio adds events.jsonl, its journal, written with the same append)

Writers: the rollout runner, `dossier run` (engine/agents/launch.py), silver mining
(`dossier train mine`), the Ray rollout and the studio's annotator runs.

A record is committed by `append_record`: one JSON line, fsynced. A process killed mid-write
leaves a torn last line; the next append first cuts that fragment off (or, when the fragment
is a whole record missing only its newline, completes it), so a new record never glues onto
a fragment and is lost with it. `read_records` never raises on a torn or undecodable line: it
skips it with a warning naming the file and line. `finished_ids` is what resuming reads: the
ids with a prediction; trajectories without one (episodes in flight when the run was killed)
are dropped so they are not written twice. `turns_in_flight` gives back the recorded turns of
those episodes, so a resumed episode replays its finished turns (their tools run again; the
model is called only for turns never recorded) and the work in flight is not lost.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from engine.datasets.formats import LineError, iter_jsonl
from tools.errors import DossierError

__all__ = ["append_record", "read_records", "repair_tail", "commit_episode", "finished_ids", "check_resume",
           "write_run_json", "write_summary", "record_turn", "turns_in_flight", "TRAJECTORIES", "PREDICTIONS",
           "TURNS"]

log = logging.getLogger(__name__)

TRAJECTORIES, PREDICTIONS, TURNS = "trajectories.jsonl", "predictions.jsonl", "turns.jsonl"


def repair_tail(path: Path) -> int:
    """Make `path` end at a line boundary; returns the bytes cut (0 when it already did).

    A last line without its newline was being written when the process died. When it is a
    whole JSON object (the kill fell between the record and its newline) it is kept and the
    newline added; otherwise it is cut off: it was never committed.
    """
    if not path.is_file():
        return 0
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        block, start = 1 << 16, size
        while start > 0:  # find the last newline, reading backwards
            start = max(0, start - block)
            fh.seek(start)
            newline = fh.read(size - start).rfind(b"\n")
            if newline >= 0:
                start += newline + 1
                break
        fh.seek(start)
        fragment = fh.read()
        if _whole_record(fragment):
            fh.write(b"\n")
            cut = 0
        else:
            fh.truncate(start)
            cut = len(fragment)
        fh.flush()
        os.fsync(fh.fileno())
    if cut:
        log.warning("%s: removed a torn last line (%d bytes; the process was stopped while writing it)", path, cut)
    return cut


def _whole_record(fragment: bytes) -> bool:
    try:
        return isinstance(json.loads(fragment.decode("utf-8")), dict)
    except ValueError:  # not UTF-8, or not JSON
        return False


def append_record(path: str | Path, record) -> None:
    """Append one record (a dict or an object with `to_json`) as a JSON line, fsynced; a torn tail is repaired first."""
    path = Path(path)
    obj = record.to_json() if hasattr(record, "to_json") else record
    # a lone surrogate (no character) becomes a \uXXXX escape, which JSON reads back as it was
    line = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
    repair_tail(path)
    with open(path, "ab") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: str | Path) -> list[dict]:
    """Every JSON object line of a run file (none when the file is absent).

    A line that is torn, not UTF-8, not JSON or not an object is skipped with a warning that
    names the file and line; reading never raises for what a file holds.
    """
    path = Path(path)
    if not path.is_file():
        return []
    errors: list[LineError] = []
    records = []
    for number, obj in iter_jsonl(path, errors):
        if isinstance(obj, dict):
            records.append(obj)
        else:
            errors.append(LineError(str(path), number, f"a JSON {type(obj).__name__}, not an object"))
    for err in errors:
        log.warning("skipped %s (a line cut by a crash, or edited by hand)", err)
    return records


def commit_episode(out: Path, trajectory, prediction) -> None:
    """Write one finished episode: its trajectory, then its prediction (the commit marker)."""
    append_record(out / TRAJECTORIES, trajectory)
    append_record(out / PREDICTIONS, prediction)


def finished_ids(out: Path) -> set[str]:
    """Ids with a prediction in `out`; repairs torn tails and drops trajectories of unfinished episodes."""
    predictions, trajectories = out / PREDICTIONS, out / TRAJECTORIES
    repair_tail(predictions)
    done = {str(r["id"]) for r in read_records(predictions) if "id" in r}
    if trajectories.exists():
        repair_tail(trajectories)
        kept, seen, total = [], set(), 0
        for record in read_records(trajectories):
            total += 1
            qid = str(record.get("id"))
            if qid in done and qid not in seen:  # a trajectory without its prediction was in flight
                kept.append(record)
                seen.add(qid)
        if len(kept) != total or _has_bad_lines(trajectories, total):
            _rewrite(trajectories, kept)
    return done


def record_turn(out: Path, record: dict) -> None:
    """Keep one model turn of an episode in flight: {"id", "episode", "turn", "history", "text", "token_ids",
    "tokens", "model_s"} ("history": the backend's fingerprint of the conversation the turn followed).

    "id" is the top-level question, "episode" the episode's key (the question id, or for a child
    episode its parent's key and its place among the spawned children), "turn" its count of model
    calls before this one.
    """
    append_record(out / TURNS, record)


def turns_in_flight(out: Path, done: set[str]) -> dict[tuple[str, int], dict]:
    """The recorded turns of unfinished episodes, by (episode key, turn); the file is cut down to them.

    Turns of episodes finished since are dropped from turns.jsonl (they are in trajectories.jsonl);
    when none is left the file is removed.
    """
    path = out / TURNS
    if not path.exists():
        return {}
    repair_tail(path)
    kept = [r for r in read_records(path)
            if str(r.get("id")) not in done and isinstance(r.get("episode"), str) and isinstance(r.get("turn"), int)]
    if kept:
        _rewrite(path, kept)
    else:
        path.unlink()
    return {(r["episode"], r["turn"]): r for r in kept}


def _has_bad_lines(path: Path, good: int) -> bool:
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip()) != good


def _rewrite(path: Path, records: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        for record in records:
            fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def check_resume(out: Path, meta: dict, keys: tuple[str, ...], hint: str,
                 upgrade: Callable[[dict], dict] | None = None) -> dict | None:
    """Refuse to resume a run directory whose run.json differs from `meta` on `keys`.

    Args:
        out: the run directory.
        meta: run.json for this call.
        keys: the fields a resumed run must share.
        hint: what to do instead, for the error message.
        upgrade: fills in, for an old run.json, what was added since (settings' new defaults).

    Returns:
        The existing run.json, or None for a new run.

    Raises:
        DossierError: run.json is unreadable, or differs on some of `keys` (named).
    """
    path = out / "run.json"
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise DossierError(f"{path} is not readable JSON ({err}); use another --out, or delete that run.json") from None
    if upgrade is not None:
        old = upgrade(old)
    diffs = [k for k in keys if old.get(k) != meta.get(k)]
    if diffs:
        raise DossierError(f"{out} holds a run with different {', '.join(diffs)}; {hint}")
    return old


def write_run_json(out: Path, meta: dict) -> None:
    """Create the run directory and its run.json (atomically; kept as first written when a run resumes)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run.json"
    if not path.exists():
        tmp = path.with_name("run.json.tmp")
        tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


def write_summary(out: Path, report: dict) -> dict:
    """Write run_summary.json: this call's figures, with every earlier call's kept under "earlier_calls".

    A resumed run's call measures only the episodes it ran (none when all were done), so the
    figures of the call that ran them must not be overwritten.
    """
    path = out / "run_summary.json"
    earlier = []
    try:
        previous = json.loads(path.read_text()) if path.exists() else None
    except ValueError:  # a summary cut by a crash: nothing to keep
        previous = None
    if isinstance(previous, dict):
        earlier = [*previous.pop("earlier_calls", []), previous]
    report = report | {"earlier_calls": earlier}
    path.write_text(json.dumps(report, indent=2))
    return report
