"""How much of the shared extraction prefix the engine served from its cache, from a workflow run's trajectories.

Every document of a question starts its extraction with the same system prompt and the same
first lines (the question); only the document's details differ. The engine should compute
that shared prefix once per question (or once per run) and read it from the prefix cache for
every further document. For each question this module renders the documents' first prompts with
the model's chat template, takes their longest common token prefix (the shared instruction
prefix, S tokens) and compares it with the `cached` counter of each later document's first turn:

    share from cache = min(cached, S) / S      (documents after the first of their question)

    report = prefix_cache_report(trajectories, render)   # render(messages) -> token ids
    report["share_from_cache"], report["min_share"], report["documents"]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

__all__ = ["prefix_cache_report", "render_with", "load_workflow_trajectories", "run_report"]


def render_with(processor) -> Callable[[list], list[int]]:
    """A renderer for first prompts: each message with the chat template, then the generation prompt."""
    def render(messages: list) -> list[int]:
        ids: list[int] = []
        for index, (role, content) in enumerate(messages):
            ids += processor.render_message(role, content, first=index == 0).token_ids
        return ids + processor.generation_prompt().token_ids

    return render


def _common_prefix(sequences: list[list[int]]) -> int:
    first = sequences[0]
    length = len(first)
    for other in sequences[1:]:
        length = min(length, len(other))
        for i in range(length):
            if first[i] != other[i]:
                length = i
                break
    return length


def _first_cached(record: dict, extraction: dict) -> int:
    """Tokens a document's first extraction turn found cached (its steps sit in the record's top-level steps)."""
    return int(record["steps"][extraction["step_numbers"][0] - 1]["tokens"].get("cached", 0))


def load_workflow_trajectories(path: str | Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                if record.get("agent") == "workflow":
                    out.append(record)
    return out


def prefix_cache_report(trajectories: list[dict], render: Callable[[list], list[int]]) -> dict:
    """The shared-prefix cache share over every question with at least two extracted documents.

    Returns:
        {"questions", "documents" (after the first), "shared_prefix_tokens" (mean S),
         "cached_tokens", "share_from_cache" (sum of min(cached, S) / sum of S), "min_share",
         "first_document_cached" (tokens the first document of each question found cached)}
    """
    questions = documents = shared_total = cached_total = first_cached = 0
    shares, prefix_lengths = [], []
    for record in trajectories:
        extractions = [x for x in (record.get("workflow") or {}).get("extractions", [])
                       if x.get("prompt") and x.get("step_numbers")]
        if len(extractions) < 2:
            continue
        prompts = [render(x["prompt"]) for x in extractions]
        shared = _common_prefix(prompts)
        if shared == 0:
            continue
        questions += 1
        prefix_lengths.append(shared)
        first_cached += _first_cached(record, extractions[0])
        for x in extractions[1:]:
            cached = min(_first_cached(record, x), shared)
            documents += 1
            shared_total += shared
            cached_total += cached
            shares.append(cached / shared)
    return {"questions": questions, "documents": documents,
            "shared_prefix_tokens": round(sum(prefix_lengths) / len(prefix_lengths), 1) if prefix_lengths else None,
            "cached_tokens": cached_total, "share_from_cache": cached_total / shared_total if shared_total else None,
            "min_share": min(shares) if shares else None, "first_document_cached": first_cached}


def run_report(out: Path, engine) -> dict:
    """run_summary.json's "prefix_cache": per-document extractions share one prompt prefix; how much came from cache."""
    return {"prefix_cache": prefix_cache_report(load_workflow_trajectories(out / "trajectories.jsonl"),
                                                render_with(engine.processor))}
