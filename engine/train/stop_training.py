"""`dossier train stop` as a function: trajectories → (features, label) per search → a fitted stop rule.

Questions are split by document (as for query training); the rule is fitted on the training
side and its effect simulated on the held-out episodes: at the first search where it fires,
the episode would have answered instead of searching on. Reported: searches saved, gold pages
that the cut-off searches would have found (lost), the classifier's AUC, and "answer at the
budget" accuracy (MADQA's Figure 9 rule: the last answer given within the searches made).
The real effect on accuracy and Kuiper needs a run with `dossier run --stop-rule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.train.records import load_runs
from engine.train.split import split_by_document
from engine.agents.stop_features import episode_examples
from engine.agents.stop_rule import StopRule, fit_stop_rule
from tools.errors import DossierError

__all__ = ["StopTraining", "train_stop_rule", "simulate"]


@dataclass(slots=True)
class StopTraining:
    runs: list[Path]  # run directories of agent episodes (trajectories + run.json)
    out: Path  # the rule's JSON file
    questions: Path | None = None  # gold questions (default: each run.json's)
    kind: str = "logistic"  # "logistic" or "gb"
    max_lost: float = 0.1  # share of helpful continuations the threshold may cut on the training side
    heldout_share: float = 0.3  # share of questions held out by document (0: fit on all, no simulation)
    seed: int = 0
    min_searches: int = 1  # the rule never fires before this many searches


def _max_iterations(meta: dict) -> int:
    settings = meta.get("settings") if isinstance(meta.get("settings"), dict) else {}
    return int(settings.get("max_iterations", 10))


def simulate(rule: StopRule, records) -> dict:
    """What the rule would have done on recorded episodes: searches saved, gold lost, answers within budget."""
    from engine.eval.metrics.anls import ANLSScorer

    scorer = ANLSScorer()
    searches_before = searches_after = lost = fired = 0
    correct_before = correct_after = 0
    for record in records:
        steps = [s for s in record.raw["steps"] if isinstance(s, dict)]
        gold = {(e.document, e.page) for e in record.question.evidence}
        search_steps = [i for i, s in enumerate(steps) if (s.get("tool_call") or {}).get("name") == "search"]
        cut = None
        for i in search_steps:
            decision = rule.decide(steps[:i + 1], record.question.question, _max_iterations(record.run_meta))
            if decision and decision[0]:
                cut = i
                break
        kept_searches = [i for i in search_steps if cut is None or i <= cut]
        searches_before += len(search_steps)
        searches_after += len(kept_searches)
        fired += cut is not None
        seen = {(p.get("document"), p.get("page")) for i in kept_searches
                for p in (steps[i].get("tool_result") or {}).get("pages") or []}
        later = {(p.get("document"), p.get("page")) for i in search_steps if i not in kept_searches
                 for p in (steps[i].get("tool_result") or {}).get("pages") or []}
        lost += len((later - seen) & gold)
        final = (record.raw.get("final") or {}).get("answer")
        correct_before += scorer(final, record.question.answer_variants) >= 0.5
        # stopped at the cut: the answer given by then (MADQA's budget rule), none -> wrong
        answers = [s for j, s in enumerate(steps) if (s.get("tool_call") or {}).get("name") == "answer"
                   and (cut is None or sum(1 for i in search_steps if i < j) <= len(kept_searches))]
        answer = (answers[-1]["tool_call"].get("arguments") or {}).get("answer") if answers else None
        correct_after += answer is not None and scorer(answer, record.question.answer_variants) >= 0.5
    n = len(records)
    return {"episodes": n, "fired": fired, "searches": searches_before, "searches_with_rule": searches_after,
            "searches_saved": searches_before - searches_after,
            "searches_per_question": searches_before / n if n else None,
            "searches_per_question_with_rule": searches_after / n if n else None,
            "gold_pages_lost": lost, "accuracy": correct_before / n if n else None,
            "accuracy_at_budget_with_rule": correct_after / n if n else None}


def _examples(records) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for record in records:
        steps = [s for s in record.raw["steps"] if isinstance(s, dict)]
        gold = {(e.document, e.page) for e in record.question.evidence}
        for features, label in episode_examples(steps, record.question.question, gold, _max_iterations(record.run_meta)):
            rows.append(features)
            labels.append(label)
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), -1), np.asarray(labels, dtype=np.int64)


def _auc(p: np.ndarray, y: np.ndarray) -> float | None:
    positives, negatives = p[y == 1], p[y == 0]
    if not len(positives) or not len(negatives):
        return None
    wins = (positives[:, None] > negatives[None, :]).sum() + 0.5 * (positives[:, None] == negatives[None, :]).sum()
    return float(wins / (len(positives) * len(negatives)))


def train_stop_rule(job: StopTraining) -> dict:
    """Fit, simulate on held-out episodes, save; returns the report (also stored in the rule's meta)."""
    records, problems = load_runs(job.runs, job.questions)
    records = [r for r in records if r.source != "silver"]  # mined episodes never search on: nothing to learn
    if not records:
        raise DossierError("no agent or human episodes in the given runs (silver ones have one search and teach "
                           "nothing about stopping)")
    split = None
    if job.heldout_share > 0:
        split = split_by_document(list({r.id: r.question for r in records}.values()), job.heldout_share, job.seed)
        held_docs = set(split.heldout_documents)
        train = [r for r in records if not held_docs.intersection(e.document for e in r.question.evidence)]
        held = [r for r in records if held_docs.intersection(e.document for e in r.question.evidence)]
    else:
        train, held = records, []
    x, y = _examples(train)
    rule = fit_stop_rule(x, y, job.kind, job.max_lost, job.seed, job.min_searches)
    report = {"kind": job.kind, "threshold": rule.threshold, "max_lost": job.max_lost,
              "runs": [str(r) for r in job.runs], "problems": problems[:20],
              "train": {"episodes": len(train), "searches": int(len(y)), "label_wont_help": int(y.sum()),
                        "auc": _auc(rule.probability(x), y), "simulation": simulate(rule, train)}}
    if held:
        hx, hy = _examples(held)
        report["heldout"] = {"episodes": len(held), "searches": int(len(hy)), "label_wont_help": int(hy.sum()),
                             "auc": _auc(rule.probability(hx), hy) if len(hy) else None,
                             "simulation": simulate(rule, held), "question_ids": [r.id for r in held]}
    if split is not None:
        report["split"] = {"seed": job.seed, "heldout_share": job.heldout_share,
                           "heldout_documents": split.heldout_documents}
    rule.meta = report
    job.out.parent.mkdir(parents=True, exist_ok=True)
    rule.save(job.out)
    return report
