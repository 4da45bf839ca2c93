"""The adapter card: what an adapter was trained on, how, and what it measured (README.md + card.json).

Written beside peft's adapter files so an adapter directory copied to another machine still
says which base model it needs, which trajectories (and which of them silver) it learned from,
its hyper-parameters, its losses, and the first-query hit rates before and after training.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tools.markdown import markdown_table

__all__ = ["write_card"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _hits_rows(hits: dict | None) -> list[str]:
    if not hits:
        return ["Not measured here (`--corpus` without `--no-measure` measures them; or "
                "`dossier retrieval-eval --model BASE --adapter DIR` on held-out questions)."]
    cells = []
    for side in ("heldout", "train"):
        for model in ("base", "tuned"):
            row = hits.get(side, {}).get(model)
            if row:
                cells.append([f"{side} ({row['n']})", model, f"{_pct(row['page_hit'])} {row['page_hit_ci']}",
                              _pct(row["doc_hit"]), _pct(row["searched"])])
    rows = markdown_table(["questions", "model", "first-query page hit@k", "document hit@k", "first turn a search"],
                          cells)
    if hits.get("heldout", {}).get("mcnemar_p") is not None:
        rows.append(f"\nHeld-out, paired: McNemar exact p = {hits['heldout']['mcnemar_p']:.3g} "
                    f"(only base {hits['heldout']['only_base']}, only tuned {hits['heldout']['only_tuned']}).")
    return rows


def write_card(out: Path, card: dict) -> None:
    """Write card.json and README.md for an adapter directory.

    `card` holds: base_model, data (runs, sources, pairs, split, filters, skipped), agent
    (settings the prompts were rendered with), lora (hyper-parameters), training (TrainResult),
    hits (first-query hit rates; optional).
    """
    card = {"written": time.strftime("%Y-%m-%dT%H:%M:%S"), **card}
    (out / "card.json").write_text(json.dumps(card, indent=2, default=str) + "\n", encoding="utf-8")
    data, training, lora, agent = card["data"], card["training"], card["lora"], card["agent"]
    sources = ", ".join(f"{k} {v}" for k, v in data["episodes_by_source"].items()) or "none"
    pair_sources = ", ".join(f"{k} {v}" for k, v in data["pairs_by_source"].items()) or "none"
    silver = " (silver: mined by `dossier trajectories mine`, not human searches)" if data["pairs_by_source"].get("silver") else ""
    skipped = "; ".join(f"{reason}: {count}" for reason, count in data["skipped"].items()) or "none"
    evals = ", ".join(f"{e['eval_loss']:.3f} (step {e['step']})" for e in training["eval_losses"]) or "no held-out pairs"
    lines = [
        f"# LoRA adapter for query formulation — base model `{card['base_model']}`",
        "",
        "Trained by `dossier train queries`: the bm25 agent's own prompt up to a search turn → the search call "
        "that put a gold page in its results. Load it with `dossier run --adapter DIR` (merged into the weights).",
        "",
        "## Data",
        f"- trajectories: {', '.join(data['runs'])}",
        f"- episodes by source: {sources}; per question only the most trusted source is kept (human > agent > silver)",
        f"- pairs by source: {pair_sources}{silver}",
        f"- filters: {json.dumps(data['filters'])}",
        f"- split by document (seed {data['split']['seed']}): train {data['split']['train_pairs']} pairs / "
        f"{data['split']['train_questions']} questions / {data['split']['train_documents']} documents; held out "
        f"{data['split']['heldout_pairs']} pairs / {data['split']['heldout_questions']} questions / "
        f"{data['split']['heldout_documents']} documents",
        f"- left out: {skipped}",
        f"- prompts rendered with agent settings: k={agent['k']}, max_iterations={agent['max_iterations']}, "
        f"search_mode={agent['search_mode']}; run the adapter with the same settings",
        "",
        "## Hyper-parameters",
        *markdown_table(["setting", "value"], lora.items()),
        "",
        "## Training",
        f"- {training['steps']} optimiser steps in {training['seconds']:.1f} s on {training['device']}; "
        f"peak memory (process RSS) {training['peak_rss_mib']:.0f} MiB",
        f"- trainable parameters {training['trainable_parameters']:,} of {training['total_parameters']:,}",
        f"- training loss: first {training['train_losses'][0]['loss']:.3f}, last {training['train_losses'][-1]['loss']:.3f}"
        if training["train_losses"] else "- no training steps logged",
        f"- held-out loss: before {training['initial_eval_loss']:.3f}; then {evals}"
        if training["initial_eval_loss"] is not None else "- no held-out pairs (held-out share 0)",
        "",
        "## First-query hit rates (Wilson 95% intervals)",
        *_hits_rows(card.get("hits")),
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
