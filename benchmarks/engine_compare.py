"""Run Dossier's engine and its peers turn by turn on one workload, and report one row per system.

Turns alternate between the systems (Dossier's turn t, then each peer's turn t, then turn
t + 1), so a change of load on a shared machine hits all of them alike. A peer that runs
sessions one after another is measured on a subset of sessions and its time scaled to all;
each row says how many sessions it ran. The headline ratio is against the strongest
(fastest) Hugging Face peer; every row is printed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, fields, replace

import torch

from engine.core.counters import Counters

__all__ = ["add_ratios", "compare", "minus", "row", "timed_turns"]


def minus(after: Counters, before: Counters) -> Counters:
    return Counters(**{f.name: getattr(after, f.name) - getattr(before, f.name) for f in fields(Counters)})


def row(key: str, label: str, measured_s: float, measured: int, sessions: int, prefilled: int, outputs,
        reference) -> dict:
    """One system's figures: its time scaled from `measured` to `sessions` sessions, and how many match Dossier's."""
    scaled = measured_s * sessions / measured
    return {"system": key, "label": label, "seconds": round(scaled, 3), "measured_s": round(measured_s, 3),
            "sessions_measured": measured, "tokens_prefilled_measured": prefilled,
            "sessions_matching_dossier": sum(a == b for a, b in zip(reference, outputs))}


def compare(engine, model: str, workload, ours_loop, loops: dict, measured: int, say) -> dict:
    """Run Dossier (all sessions) and every loop in `loops` (the first `measured` sessions), interleaved.

    Args:
        engine: Dossier's engine (its counters and phases exclude the warm-up).
        ours_loop: Dossier's `EngineLoop` over every session.
        loops: key -> loop with `run_turn(turn)`, `outputs`, `tokens_prefilled` (or `engine`), `label`.
        measured: sessions each loop runs; its time is scaled to all sessions.
    Returns:
        the figures: one row per system, ratios, and Dossier's counters.
    """
    if engine.runner.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    before = engine.stats()["phases"]
    counters_before = replace(engine.counters)
    loop_counters = {k: replace(loop.engine.counters) for k, loop in loops.items() if hasattr(loop, "engine")}
    ours_s = 0.0
    times = {key: 0.0 for key in loops}
    for turn in range(workload.turns):
        ours_s += ours_loop.run_turn(turn)
        for key, loop in loops.items():
            times[key] += loop.run_turn(turn)
        so_far = ", ".join(f"{k} {t:.1f} s" for k, t in times.items())
        say(f"  turn {turn + 1}/{workload.turns}: dossier {ours_s:.1f} s{', ' + so_far if so_far else ''} so far")
    stats = engine.stats()
    phases = {k: round(stats["phases"][k] - before[k], 4) for k in before}
    counters = minus(engine.counters, counters_before).as_dict()
    ours = ours_loop.outputs
    rows = [row("dossier", "dossier (paged KV kept per session, prefix cache, continuous batching)", ours_s,
                 workload.sessions, workload.sessions, counters["tokens_prefilled"], ours, ours)]
    for key, loop in loops.items():
        prefilled = (minus(loop.engine.counters, loop_counters[key]).tokens_prefilled if hasattr(loop, "engine")
                     else loop.tokens_prefilled)
        rows.append(row(key, loop.label, times[key], measured, workload.sessions, prefilled, loop.outputs, ours))
    result = {
        "model": model,
        "device": str(engine.runner.device),
        "dtype": str(engine.runner.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "workload": asdict(workload),
        "rows": rows,
        "dossier_s": round(ours_s, 3),
        "cache_reuse_fraction": round(counters["cache_reuse_fraction"], 4),
        "prefill_tok_s": round(counters["tokens_prefilled"] / phases["prefill_time_s"], 1) if phases["prefill_time_s"] else None,
        "decode_tok_s": round(phases["decode_tokens"] / phases["decode_time_s"], 1) if phases["decode_time_s"] else None,
        "generated_tok_s": round(counters["tokens_generated"] / ours_s, 1),
        "outputs_match": all(r["sessions_matching_dossier"] == r["sessions_measured"] for r in rows),
        "sessions_matching": min(r["sessions_matching_dossier"] for r in rows),
        "counters": counters,
        "phases": phases,
        "kv_blocks_total": stats["kv_blocks_total"],
        "preemptions": stats["preemptions"],
        "attention_backend": stats["attention_backend"],
    }
    add_ratios(result)
    if "naive" in loops:  # the fields earlier versions reported
        naive = next(r for r in rows if r["system"] == "naive")
        result.update({"naive_s": naive["seconds"], "naive_sessions_measured": measured,
                       "naive_measured_s": naive["measured_s"], "naive_tokens_prefilled": naive["tokens_prefilled_measured"],
                       "naive_generated_tok_s": round(measured * workload.turns * workload.new_tokens / times["naive"], 1)})
    if engine.runner.device.type == "cuda":
        result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


def add_ratios(result: dict) -> None:
    """speedup_vs_<system> for every row, and the strongest (fastest) HF peer's ratio as the headline."""
    ours = result["dossier_s"]
    for row in result["rows"]:
        row["dossier_speedup"] = round(row["seconds"] / ours, 3) if ours else None
        if row["system"] != "dossier":
            result[f"speedup_vs_{row['system']}"] = row["dossier_speedup"]
    peers = [r for r in result["rows"] if r["system"] in ("naive", "kv_cache", "padded")]
    if peers:
        strongest = min(peers, key=lambda r: r["seconds"])
        result["strongest_peer"] = strongest["system"]
        result["speedup_vs_strongest_peer"] = strongest["dossier_speedup"]


def timed_turns(loop, turns: int) -> float:
    """Run every turn of a loop on its own (not interleaved); return the seconds."""
    started = time.perf_counter()
    for turn in range(turns):
        loop.run_turn(turn)
    return time.perf_counter() - started
