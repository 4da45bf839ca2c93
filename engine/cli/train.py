"""`dossier train` (split, queries, stop) and `dossier trajectories mine`: learning from trajectories.

    dossier train split --questions Q.jsonl --out DIR                   # train/held-out questions by document
    dossier trajectories mine --corpus C --questions Q.jsonl --out RUN  # silver trajectories
    dossier train queries --trajectories RUN --model default --out ADAPTER [--corpus C]
    dossier train stop --trajectories RUN --out STOP.json               # the learned stop rule
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import (DEVICE, MODEL, CorpusOpt, DeviceOpt, FormatOpt, LimitOpt, ModelOpt, OutputFormat,
                                StepProgress, emit_json)

__all__ = ["register", "train_app", "trajectories_app"]

train_app = typer.Typer(no_args_is_help=True, help="Learn from trajectories: LoRA query formulation, a learned "
                                                   "stop rule, and document-disjoint splits.")
trajectories_app = typer.Typer(no_args_is_help=True, help="Work with trajectories: mine silver ones where no human "
                                                          "searched.")

RunsOpt = Annotated[list[Path], typer.Option("--trajectories", "-t", help="A run directory (or trajectories.jsonl); "
                                                                          "repeat for several.")]
QuestionsOpt = Annotated[Path | None, typer.Option("--questions", help="Gold questions for every run "
                                                                      "(default: each run.json's).")]


@train_app.command("split")
def split_cmd(
    questions: Annotated[Path, typer.Option(help="Canonical question file (JSONL) with gold evidence.")],
    out: Annotated[Path, typer.Option(help="Directory for train.jsonl, heldout.jsonl and split.json.")],
    heldout_share: Annotated[float, typer.Option(help="Share of questions held out (whole documents at a time).")] = 0.3,
    seed: Annotated[int, typer.Option(help="Orders the document groups; same seed, same split.")] = 0,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Split questions into training and held-out files by document: no gold document is on both sides.

    Questions citing the same document (or linked by a cross-document question) stay together.
    Mine silver trajectories on train.jsonl and measure on heldout.jsonl.

    Example:
        $ dossier train split --questions fb.jsonl --out fb-split --heldout-share 0.4
        train 59 questions (35 documents), held out 41 questions (25 documents); 0 without evidence
        wrote fb-split/train.jsonl, fb-split/heldout.jsonl, fb-split/split.json
    """
    import json

    from engine.datasets import load_questions, write_jsonl
    from engine.train.split import split_by_document

    items, errors = load_questions(questions)
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    split = split_by_document(items, heldout_share, seed)
    out.mkdir(parents=True, exist_ok=True)
    by_id = {q.id: q for q in items}
    write_jsonl(out / "train.jsonl", [by_id[i].to_json() for i in split.train_ids])
    write_jsonl(out / "heldout.jsonl", [by_id[i].to_json() for i in split.heldout_ids])
    (out / "split.json").write_text(json.dumps({"questions": str(questions.resolve()), **split.to_json()}, indent=2) + "\n")
    if fmt is OutputFormat.json:
        emit_json({"out": str(out), **split.to_json()})
        return
    typer.echo(f"train {len(split.train_ids)} questions ({len(split.train_documents)} documents), held out "
               f"{len(split.heldout_ids)} questions ({len(split.heldout_documents)} documents); "
               f"{len(split.no_evidence_ids)} without evidence")
    typer.echo(f"wrote {out / 'train.jsonl'}, {out / 'heldout.jsonl'}, {out / 'split.json'}")


@trajectories_app.command("mine")
def mine_cmd(
    corpus: CorpusOpt,
    questions: Annotated[Path, typer.Option(help="Training questions (JSONL) with gold evidence pages.")],
    out: Annotated[Path, typer.Option(help="Run directory for the silver trajectories (resumable).")],
    k: Annotated[int, typer.Option("-k", "--k", help="A query counts when a gold page is in its top k (the agent's k).")] = 5,
    search_mode: Annotated[str, typer.Option(help="boolean (the agent's query language) or bag.")] = "boolean",
    max_terms: Annotated[int, typer.Option(help="Most keywords in a mined query.")] = 4,
    pool: Annotated[int, typer.Option(help="Question words tried (those on a gold page, rarest first).")] = 8,
    page_terms: Annotated[int, typer.Option(help="Distinctive gold-page words tried beside question words.")] = 3,
    max_queries: Annotated[int, typer.Option(help="Successful queries kept per question.")] = 5,
    limit: LimitOpt = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Mine silver trajectories: short keyword queries that put a gold page in BM25's top k.

    For each question, combinations of its words found on a gold page (and a few distinctive
    words of that page) are searched as the agent's tool would; the best hit becomes a search
    turn followed by an answer with the gold answer, written in the run-directory format and
    marked "source": "silver" (every mined query is kept under "silver"). Re-running resumes.

    Example:
        $ dossier trajectories mine --corpus fb-corpus --questions fb-split/train.jsonl --out runs/silver
        mined 56 of 59 questions (3 with no query that finds a gold page) in 178.8 s; 272 queries kept
        best queries: gold page at rank 1 for 33, rank 2-5 for 23
        wrote runs/silver/trajectories.jsonl (source: silver)
    """
    from engine.agents.env import AgentEnv
    from engine.agents.run_dir import check_resume, commit_episode, finished_ids, write_run_json, write_summary
    from engine.agents.settings import AgentSettings
    from engine.datasets import load_questions
    from engine.train.silver import MineConfig, mine_question, silver_episode
    from tools.errors import DossierError

    items, errors = load_questions(questions)
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    items = [q for q in items if q.evidence][:limit]
    if not items:
        raise DossierError(f"{questions} has no questions with gold evidence pages to mine from")
    settings = AgentSettings(k=k, search_mode=search_mode)
    config = MineConfig(max_terms=max_terms, pool=pool, page_terms=page_terms, max_queries=max_queries)
    env = AgentEnv(corpus, settings.page_chars, settings.search_mode)
    meta = {"agent": "silver", "source": "silver", "model": None, "questions": str(questions.resolve()),
            "corpus": str(corpus.resolve()), "settings": settings.to_json(),
            "mining": {"max_terms": max_terms, "pool": pool, "page_terms": page_terms, "max_queries": max_queries}}
    check_resume(out, meta, ("questions", "corpus", "settings", "mining"),
                 "it holds silver trajectories mined with other options: use another --out, or the same options to resume")
    write_run_json(out, meta)
    done = finished_ids(out)
    todo = [q for q in items if q.id not in done]
    started = time.perf_counter()
    ranks, kept, failed = [], 0, 0
    with StepProgress("trajectories mine") as progress:
        progress("questions", 0, len(todo))
        for number, question in enumerate(todo, start=1):
            try:
                mined, tried = mine_question(env, question, settings, config)
            except DossierError as err:  # one bad question never stops the batch
                typer.echo(f"question {question.id}: {err}", err=True)
                failed += 1
            else:
                trajectory, prediction = silver_episode(env, question, settings, mined, tried, config)
                commit_episode(out, trajectory, prediction)
                kept += len(mined)
                ranks.append(mined[0].gold_rank if mined else None)
            progress("questions", number, len(todo))
    seconds = time.perf_counter() - started
    found = sum(r is not None for r in ranks)
    report = {"questions": len(items), "already_done": len(items) - len(todo), "mined": found,
              "without_query": len(ranks) - found, "failed": failed, "queries_kept": kept,
              "best_rank_1": sum(r == 1 for r in ranks), "best_rank_2_to_k": sum(r is not None and r > 1 for r in ranks),
              "seconds": round(seconds, 1), "out": str(out)}
    report = write_summary(out, report)
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    typer.echo(f"mined {found} of {len(ranks)} questions ({len(ranks) - found} with no query that finds a gold page) in "
               f"{seconds:.1f} s; {kept} queries kept" + (f"; {report['already_done']} done before" if
                                                            report["already_done"] else ""))
    typer.echo(f"best queries: gold page at rank 1 for {report['best_rank_1']}, rank 2-{k} for "
               f"{report['best_rank_2_to_k']}")
    typer.echo(f"wrote {out / 'trajectories.jsonl'} (source: silver)")


@train_app.command("queries")
def queries_cmd(
    trajectories: RunsOpt,
    out: Annotated[Path, typer.Option(help="Adapter directory (peft files, README.md card, card.json).")],
    model: ModelOpt = MODEL,
    corpus: CorpusOpt = None,
    questions: QuestionsOpt = None,
    first_query_only: Annotated[bool, typer.Option(help="Only an episode's first search turn.")] = False,
    successful_only: Annotated[bool, typer.Option(help="Only episodes whose final answer is correct.")] = False,
    annotator: Annotated[list[str] | None, typer.Option(help="Only human trajectories by this annotator (repeatable).")] = None,
    sources: Annotated[str, typer.Option(help="Comma-separated sources to learn from: human, agent, silver.")] = "human,agent,silver",
    silver_variants: Annotated[int, typer.Option(help="Mined queries per silver question used as targets.")] = 3,
    k: Annotated[int, typer.Option("-k", "--k", help="The agent's pages per search (its prompt says it).")] = 5,
    max_iterations: Annotated[int, typer.Option(help="The agent's turn budget (its prompt says it).")] = 10,
    search_mode: Annotated[str, typer.Option(help="The agent's search mode: boolean or bag.")] = "boolean",
    heldout_share: Annotated[float, typer.Option(help="Share of questions held out by document (0: none).")] = 0.2,
    seed: Annotated[int, typer.Option(help="Seed of the split, the data order and the LoRA init.")] = 0,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    alpha: Annotated[float, typer.Option(help="LoRA alpha (updates scaled by alpha/rank).")] = 32.0,
    dropout: Annotated[float, typer.Option(help="LoRA dropout.")] = 0.05,
    top_layers: Annotated[int | None, typer.Option(help="Adapt only the top N layers (the backward pass stops "
                                                        "below them: faster on a CPU).")] = None,
    learning_rate: Annotated[float, typer.Option(help="AdamW peak learning rate.")] = 2e-4,
    epochs: Annotated[float, typer.Option(help="Passes over the training pairs.")] = 3.0,
    max_steps: Annotated[int, typer.Option(help="Optimiser steps (-1: decided by --epochs).")] = -1,
    batch_size: Annotated[int, typer.Option(help="Pairs per forward pass.")] = 4,
    grad_accum: Annotated[int, typer.Option(help="Forward passes per optimiser step.")] = 2,
    max_tokens: Annotated[int, typer.Option(help="Longest training pair in tokens (not a reply's length); longer "
                                                 "pairs are left out.")] = 2048,
    bf16: Annotated[bool, typer.Option(help="bf16 autocast (GPU, or CPU with avx512_bf16).")] = False,
    device: DeviceOpt = DEVICE,
    measure: Annotated[bool, typer.Option(help="Measure first-query hit rates before/after (needs --corpus).")] = True,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Fine-tune query formulation with LoRA on trajectories (human, agent or silver).

    Pairs: the bm25 agent's own prompt up to a search turn (replayed with the agent's code and
    these settings) -> the search call that put a gold page in its results. Questions are held
    out by document. With --corpus, observations of later turns are rebuilt and the first-query
    hit rate of the base and the tuned model is measured on held-out and training questions.

    Example (FinanceBench silver trajectories, this 2-core CPU under load; measure the held-out
    documents with `dossier retrieval-eval --model default --adapter adapters/fb-q`):
        $ dossier train queries -t runs/silver --corpus fb-corpus --out adapters/fb-q --no-measure \\
            --heldout-share 0 --silver-variants 1 --top-layers 4 --max-steps 12 --learning-rate 1e-3
        pairs: 56 (silver 56) from 59 episodes; train 56 pairs, held out 0 (by document)
        trained 12 steps in 1576.7 s (cpu, peak 4527 MiB); loss 3.049 -> 2.429
        wrote adapters/fb-q (README.md card); run it with: dossier run --adapter adapters/fb-q ...
    """
    from engine.agents.settings import AgentSettings
    from engine.train.pairs import PairFilter
    from engine.train.queries import QueryTraining, train_queries
    from engine.train.records import SOURCES
    from engine.train.sft import LoraSettings
    from tools.errors import DossierError

    chosen = tuple(s.strip() for s in sources.split(",") if s.strip())
    unknown = [s for s in chosen if s not in SOURCES]
    if unknown or not chosen:
        raise DossierError(f"--sources {sources!r}: choose from {', '.join(SOURCES)}")
    job = QueryTraining(
        runs=list(trajectories), model=model, out=out, corpus=corpus, questions=questions,
        filters=PairFilter(first_query_only, successful_only, tuple(annotator or ()), chosen, silver_variants),
        agent=AgentSettings(k=k, max_iterations=max_iterations, search_mode=search_mode),
        lora=LoraSettings(rank=rank, alpha=alpha, dropout=dropout, top_layers=top_layers, learning_rate=learning_rate,
                          epochs=epochs,
                          max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum, max_tokens=max_tokens,
                          bf16=bf16, seed=seed, device=device),
        heldout_share=heldout_share, seed=seed, measure=measure)
    with StepProgress("train queries", phase_units={"train": "steps"}) as progress:
        card = train_queries(job, progress=progress)
    if fmt is OutputFormat.json:
        emit_json({"out": str(out), **card})
        return
    data, training, split = card["data"], card["training"], card["data"]["split"]
    by_source = ", ".join(f"{k} {v}" for k, v in data["pairs_by_source"].items())
    typer.echo(f"pairs: {sum(data['pairs_by_source'].values())} ({by_source}) from "
               f"{sum(data['episodes_by_source'].values())} episodes; train {split['train_pairs']} pairs, held out "
               f"{split['heldout_pairs']} (by document)")
    losses = training["train_losses"]
    line = (f"trained {training['steps']} steps in {training['seconds']:.1f} s ({training['device']}, peak "
            f"{training['peak_rss_mib']:.0f} MiB); loss {losses[0]['loss']:.3f} -> {losses[-1]['loss']:.3f}")
    if training["initial_eval_loss"] is not None and training["eval_losses"]:
        line += f"; held-out loss {training['initial_eval_loss']:.3f} -> {training['eval_losses'][-1]['eval_loss']:.3f}"
    typer.echo(line)
    for side, label in (("heldout", "held-out"), ("train", "training")):
        row = (card.get("hits") or {}).get(side)
        if row:
            typer.echo(f"first-query page hit@{k} on {label} questions: base {_pct(row['base']['page_hit'])} "
                       f"{row['base']['page_hit_ci']} -> tuned {_pct(row['tuned']['page_hit'])} "
                       f"{row['tuned']['page_hit_ci']} (n={row['tuned']['n']}, McNemar p = {row['mcnemar_p']:.3g})")
    typer.echo(f"wrote {out} (README.md card); run it with: dossier run --adapter {out} ...")


@train_app.command("stop")
def stop_cmd(
    trajectories: RunsOpt,
    out: Annotated[Path, typer.Option(help="The stop rule's JSON file (give it to `dossier run --stop-rule`).")],
    questions: QuestionsOpt = None,
    kind: Annotated[str, typer.Option(help="logistic (logistic regression) or gb (gradient-boosted trees).")] = "logistic",
    max_lost: Annotated[float, typer.Option(help="Share of helpful continuations the threshold may cut, on the "
                                                 "training side.")] = 0.1,
    heldout_share: Annotated[float, typer.Option(help="Share of questions held out by document for the report "
                                                      "(0: fit on all).")] = 0.3,
    min_searches: Annotated[int, typer.Option(help="The rule never fires before this many searches.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the split and the fit.")] = 0,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Fit a stop rule predicting "searching on won't help" from agent trajectories (scikit-learn).

    Each search of each episode is a row: features the agent has at that moment (searches,
    turns left, new pages, query overlap, time since a new page of the recurring document...)
    and the label "no later search found a new gold page". Questions are held out by document;
    the report simulates the rule on held-out episodes. Its real effect on accuracy and Kuiper
    comes from `dossier run --stop-rule OUT` and `dossier eval`.

    Example (a real run on eight BM25-agent runs of the sample suites: SmolLM2, Qwen2.5 0.5B/1.5B;
    only 2 of 347 searches were followed by a search that found a new gold page):
        $ dossier train stop -t runs/demo-bm25 -t runs/cmp/default-madqa ... --out stop.json
        fitted logistic on 347 searches of 45 episodes (label "won't help" 345); threshold 0.0475; AUC 0.99
        held out (29 episodes): searches 7.93 -> 1.14 per question, 1 gold pages lost, accuracy 13.8% -> 10.3% (at budget)
        wrote stop.json; use it: dossier run --stop-rule stop.json ...
    With no helpful continuation at all it refuses: "all 290 training searches have the same label".
    """
    from engine.train.stop_training import StopTraining, train_stop_rule

    report = train_stop_rule(StopTraining(list(trajectories), out, questions, kind, max_lost, heldout_share, seed,
                                          min_searches))
    if fmt is OutputFormat.json:
        emit_json({"out": str(out), **report})
        return
    train = report["train"]
    auc = "undefined" if train["auc"] is None else f"{train['auc']:.2f}"
    typer.echo(f"fitted {kind} on {train['searches']} searches of {train['episodes']} episodes (label \"won't help\" "
               f"{train['label_wont_help']}); threshold {report['threshold']:.3g}; AUC {auc}")
    held = report.get("heldout")
    if held:
        sim = held["simulation"]
        typer.echo(f"held out ({held['episodes']} episodes): searches {sim['searches_per_question']:.2f} -> "
                   f"{sim['searches_per_question_with_rule']:.2f} per question, {sim['gold_pages_lost']} gold pages lost, "
                   f"accuracy {_pct(sim['accuracy'])} -> {_pct(sim['accuracy_at_budget_with_rule'])} (at budget)")
    typer.echo(f"wrote {out}; use it: dossier run --stop-rule {out} ...")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
    app.add_typer(trajectories_app, name="trajectories")
