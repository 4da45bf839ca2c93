"""`dossier train queries` as a function: trajectories → pairs → LoRA adapter + card (+ hit rates).

    from engine.train.queries import QueryTraining, train_queries
    summary = train_queries(QueryTraining(runs=[Path("runs/silver")], model="default", out=Path("adapters/q"),
                                          corpus=Path("corpus")))

Steps: read the runs (gold questions from each run.json), keep per question the most trusted
source, replay episodes into pairs with the agent settings the adapter will run with, split
the questions by document (held-out documents never train), tokenize as the engine renders,
train with peft + trl, save the adapter, and — with a corpus — measure the first-query hit
rate of the base and the tuned model on the held-out and the training questions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.agents.settings import AgentSettings
from engine.train.pairs import PairFilter, build_pairs, split_pairs
from engine.train.records import keep_most_trusted, load_runs
from engine.train.sft import LoraSettings, require_train_extra, train_lora
from engine.train.split import split_by_document
from engine.train.tokens import encode_pair
from tools.errors import DossierError

__all__ = ["QueryTraining", "train_queries", "hit_summary", "measure_first_queries"]


@dataclass(slots=True)
class QueryTraining:
    runs: list[Path]  # run directories (or trajectories.jsonl files) to learn from
    model: str  # base model: "default", a local HF directory or a .gguf file
    out: Path  # the adapter directory
    corpus: Path | None = None  # rebuilds observations of later turns; measures hit rates
    questions: Path | None = None  # gold questions for every run (default: each run.json's)
    filters: PairFilter = field(default_factory=PairFilter)
    agent: AgentSettings = field(default_factory=AgentSettings)  # the settings the adapter will run with
    lora: LoraSettings = field(default_factory=LoraSettings)
    heldout_share: float = 0.2  # share of questions held out by document (0: train on all)
    seed: int = 0  # the split's seed (training has its own in `lora`)
    measure: bool = True  # first-query hit rates before/after (needs `corpus`)
    measure_train_limit: int = 40  # training questions measured at most (held-out ones: all)


def hit_summary(rows) -> dict:
    """Page hit rate with a Wilson interval over `FirstQuery` rows."""
    from engine.eval.stats import wilson_interval

    n = len(rows)
    hits = sum(r.page_hit for r in rows)
    low, high = wilson_interval(hits, n)
    return {"n": n, "page_hits": hits, "page_hit": hits / n if n else None,
            "page_hit_ci": f"[{100 * low:.1f}, {100 * high:.1f}]",
            "doc_hit": sum(r.doc_hit for r in rows) / n if n else None,
            "searched": sum(r.query is not None for r in rows) / n if n else None}


def measure_first_queries(model: str, lora: str | None, agent: AgentSettings, env, questions: dict[str, list],
                          engine_config: dict | None = None, progress: Callable[[str, int, int], None] | None = None
                          ) -> dict[str, list]:
    """{side: [FirstQuery]} for one model (with or without an adapter) on each side's questions."""
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine
    from engine.train.first_query import generate_first_queries, score_queries

    engine = Engine.from_pretrained(model, EngineConfig(lora=lora, **(engine_config or {})))
    documents = env.documents if agent.cite_known_documents else None
    out = {}
    for side, items in questions.items():
        label = f"{'tuned' if lora else 'base'} {side}"
        queries = generate_first_queries(engine, agent, items, documents,
                                         (lambda done, total, label=label: progress(label, done, total)) if progress else None)
        out[side] = score_queries(env, items, queries, agent)
    return out


def _paired(base: list, tuned: list) -> dict:
    from engine.eval.stats import mcnemar_exact

    by_id = {r.id: r for r in base}
    pairs = [(by_id[r.id].page_hit, r.page_hit) for r in tuned if r.id in by_id]
    only_base = sum(1 for b, t in pairs if b and not t)
    only_tuned = sum(1 for b, t in pairs if t and not b)
    return {"only_base": only_base, "only_tuned": only_tuned, "mcnemar_p": mcnemar_exact(only_base, only_tuned)}


def train_queries(job: QueryTraining, progress: Callable[[str, int, int, dict], None] | None = None) -> dict:
    """Run the whole job; returns the card (also written to `job.out`)."""
    require_train_extra()
    from engine.agents.env import AgentEnv
    from engine.train.card import write_card

    records, problems = load_runs(job.runs, job.questions)
    kept, dropped = keep_most_trusted(records)
    env = None
    if job.corpus is not None:
        env = AgentEnv(job.corpus, job.agent.page_chars, job.agent.search_mode, job.agent.rerank, job.agent.late_model)
    pairs, skipped = build_pairs(kept, job.agent, env, job.filters)
    if dropped:
        skipped["episodes of a less trusted source for the same question"] = dropped
    for problem in problems:
        skipped["unreadable lines or unknown question ids"] += 1
    questions = {r.id: r.question for r in kept}
    if job.heldout_share > 0:
        split = split_by_document(list(questions.values()), job.heldout_share, job.seed)
        heldout_docs = set(split.heldout_documents)
    else:
        split, heldout_docs = None, set()
    train_pairs, held_pairs = split_pairs(pairs, heldout_docs)
    model_dir, processor = _model_and_processor(job.model)
    encoded = {"train": [], "heldout": []}
    for side, side_pairs in (("train", train_pairs), ("heldout", held_pairs)):
        for pair in side_pairs:
            example = encode_pair(processor, pair, job.lora.max_tokens)
            if example is None:
                skipped[f"longer than max_tokens={job.lora.max_tokens}"] += 1
            else:
                encoded[side].append(example)
    if not encoded["train"]:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no episodes"
        raise DossierError(f"no training pairs from {len(records)} episodes ({reasons}); check the runs' gold "
                           "questions, --corpus for later turns, and the filters")
    result = train_lora(model_dir, encoded["train"], encoded["heldout"], job.lora, job.out,
                        (lambda step, total, logs: progress("train", step, total, logs)) if progress else None)
    hits = None
    if job.measure and env is not None:
        sides = {"heldout": [questions[i] for i in (split.heldout_ids if split else [])],
                 "train": [q for q in questions.values() if not heldout_docs.intersection(e.document for e in q.evidence)
                           and any(p.question_id == q.id for p in train_pairs)][:job.measure_train_limit]}
        sides = {k: v for k, v in sides.items() if v}
        report = (lambda label, done, total: progress(label, done, total, {})) if progress else None
        base = measure_first_queries(job.model, None, job.agent, env, sides, progress=report)
        tuned = measure_first_queries(job.model, str(job.out), job.agent, env, sides, progress=report)
        hits = {side: {"base": hit_summary(base[side]), "tuned": hit_summary(tuned[side]),
                       **_paired(base[side], tuned[side])} for side in sides}
    by_source = Counter(r.source for r in kept)
    card = {
        "base_model": job.model,
        "data": {"runs": [str(r) for r in job.runs], "episodes_by_source": dict(by_source),
                 "pairs_by_source": dict(Counter(p.source for p in pairs)), "filters": _filters_json(job.filters),
                 "split": {"seed": job.seed, "heldout_share": job.heldout_share,
                           "train_pairs": len(encoded["train"]), "heldout_pairs": len(encoded["heldout"]),
                           "train_questions": len({p.question_id for p in train_pairs}),
                           "heldout_questions": len(split.heldout_ids) if split else 0,
                           "train_documents": len(split.train_documents) if split else len(
                               {d for p in pairs for d in p.documents}),
                           "heldout_documents": len(split.heldout_documents) if split else 0,
                           "heldout_document_ids": split.heldout_documents if split else []},
                 "skipped": dict(skipped), "problems": problems[:20]},
        "agent": job.agent.to_json(),
        "lora": job.lora.to_json(),
        "training": result.to_json(),
        "hits": hits,
    }
    write_card(job.out, card)
    return card


def _filters_json(filters: PairFilter) -> dict:
    return {"first_query_only": filters.first_query_only, "successful_only": filters.successful_only,
            "annotators": list(filters.annotators), "sources": list(filters.sources),
            "silver_variants": filters.silver_variants}


def _model_and_processor(model: str):
    """The HF folder of a model and the chat processor the engine would use for it (its family's)."""
    from transformers import AutoConfig

    from models.loading import resolve_model_dir
    from models.registry import family_for

    folder = resolve_model_dir(model)
    config = AutoConfig.from_pretrained(folder)
    family = family_for(config.model_type, model)
    if family.is_vision_language:
        raise DossierError(f"training query formulation supports text models; {model!r} is a {family.name} "
                           "vision-language model")
    processor, _vision = family.inputs.build(config, folder, None, None)
    if processor is None:
        raise DossierError(f"model {model!r} has no tokenizer in {folder}; training needs its chat template")
    return folder, processor
