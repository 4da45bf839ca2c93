"""The engine benchmark with page images: an agent that sees its search hits as rendered pages.

Workload (seeded): S sessions x T turns. The first turn appends a system prompt and a
question, later turns a search result; every turn appends 3-5 page images, each labelled
`File: {document}, Page: {page}` as MADQA's BM25 agent shows hits, then generates a fixed
number of tokens (greedy, stop tokens masked until then). Pages are drawn from a pool
(synthetic text pages, or pages rendered from a corpus), so popular pages recur across
sessions as BM25 hits do. Models without a tokenizer (random-weight shapes) get random
token ids for the text and the family's image markers around each image.

- Dossier: all sessions in one engine (paged KV kept across turns, image blocks keyed by
  content, encoder cache, vision encoding batched across sessions).
- Naive (the peer): each turn, HF `generate` on each session's whole history with every
  image of it re-sent and re-encoded, one session after another (a stateless client of a
  serving engine), on a subset of sessions, its time scaled to all of them.

The two sides alternate turn by turn in one process; figures and fields as the text
benchmark (`benchmarks/engine_sessions.py`), plus image counts.
"""

import random
import time
from dataclasses import dataclass

import torch

from benchmarks.engine_compare import compare
from benchmarks.engine_sessions import SYSTEM_PROMPT, WORDS, EngineLoop
from engine.core.config import EngineConfig
from engine.core.llm_engine import Engine
from engine.core.sampling_params import SamplingParams

__all__ = ["ImageWorkload", "run_image_benchmark"]


@dataclass(slots=True)
class ImageWorkload:
    sessions: int = 16  # concurrent agent episodes
    turns: int = 4  # model calls per episode
    min_images: int = 3  # page images appended per turn, at least
    max_images: int = 5  # and at most
    page_pool: int = 40  # distinct pages the images are drawn from
    page_width: int = 612  # synthetic page size in pixels (US letter at 72 dpi)
    page_height: int = 792
    new_tokens: int = 16  # tokens generated per turn (fixed)
    seed: int = 0
    corpus: str | None = None  # render pages of this corpus instead of synthetic ones
    dpi: int = 72  # rendering DPI for corpus pages


def synthetic_page(rng: random.Random, width: int, height: int, label: str):
    """A white page with a title and lines of words, like a rendered report page."""
    from PIL import Image, ImageDraw

    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    draw.text((40, 30), label, fill="black")
    y = 60
    while y < height - 40:
        if rng.random() < 0.08:  # a table rule or a chart bar
            draw.rectangle((40, y, 40 + rng.randrange(60, width - 80), y + rng.randrange(4, 30)), fill=(60, 60, 160))
        else:
            draw.text((40, y), " ".join(rng.choice(WORDS) for _ in range(rng.randrange(6, 14))), fill="black")
        y += 14
    return page


def page_pool(workload: ImageWorkload, rng: random.Random) -> list[tuple[str, int, object]]:
    """(document, page, image) of every page the sessions may be shown."""
    if workload.corpus:
        from tools.corpus import CorpusStore, RenderSettings

        store = CorpusStore(workload.corpus)
        pages = [(p.doc_id, p.page) for p in store.iter_pages()]
        chosen = rng.sample(pages, min(workload.page_pool, len(pages)))
        settings = RenderSettings(dpi=workload.dpi)
        return [(doc, page, store.render(doc, page, settings)) for doc, page in chosen]
    return [(f"report-{i // 8}", 1 + i % 8, synthetic_page(rng, workload.page_width, workload.page_height,
                                                          f"Report {i // 8}, page {1 + i % 8}"))
            for i in range(workload.page_pool)]


def build_plan(engine: Engine, workload: ImageWorkload) -> list[list[list[tuple]]]:
    """Per session, per turn, the appends: ("message", role, content), ("prompt",), ("tokens", ids), ("image", img)."""
    rng = random.Random(workload.seed)
    pool = page_pool(workload, rng)
    vocab = engine.adapter.shape.vocab_size
    markers = {engine.adapter.vision.image_token_id, engine.adapter.vision.start_token_id, engine.adapter.vision.end_token_id}
    words = [t for t in range(10, vocab) if t not in markers]
    shared = [rng.choice(words) for _ in range(256)]
    plan = []
    for session in range(workload.sessions):
        turns = []
        for turn in range(workload.turns):
            hits = rng.sample(pool, rng.randint(workload.min_images, workload.max_images))
            if engine.processor is None:
                ops = [("tokens", (shared if turn == 0 else []) + [rng.choice(words) for _ in range(24)])]
                for _doc, _page, image in hits:
                    ops += [("tokens", [rng.choice(words) for _ in range(8)]), ("image", image)]
                turns.append(ops)
                continue
            parts = []
            for doc, page, image in hits:
                parts += [f"File: {doc}, Page: {page}\n", image, "\n"]
            if turn == 0:
                question = f"Question {session}: what was the total {rng.choice(WORDS)} in {2010 + session % 14}?\n"
                turns.append([("message", "system", SYSTEM_PROMPT), ("message", "user", [question, *parts]), ("prompt",)])
            else:
                query = " ".join(rng.choice(WORDS) for _ in range(3))
                turns.append([("message", "user", [f"Search results for: {query}\n", *parts]), ("prompt",)])
        plan.append(turns)
    return plan


class NaiveLoop:
    """The peer: each turn, HF `generate` on a session's whole history with all of its images."""

    label = "hf naive (generate, batch 1, every image of the history re-sent and re-encoded)"

    def __init__(self, hf_model, engine: Engine, workload: ImageWorkload, plan, sessions: int) -> None:
        self.hf_model, self.workload, self.plan = hf_model, workload, plan[:sessions]
        self.processor, self.vision = engine.processor, engine.adapter.vision
        self.stops = sorted(engine.stop_token_ids) or None
        self.device = next(hf_model.parameters()).device
        self.histories: list[list[int]] = [[] for _ in self.plan]
        self.items: list[list[tuple[int, object]]] = [[] for _ in self.plan]  # (first token, MultimodalItem)
        self.turn_starts: list[int | None] = [None for _ in self.plan]
        self.outputs: list[list[list[int]]] = [[] for _ in self.plan]
        self.tokens_prefilled = 0  # history tokens re-sent and recomputed
        self.images_encoded = 0  # images re-sent and re-encoded

    def _append(self, i: int, segment) -> None:
        self.items[i] += [(len(self.histories[i]) + item.offset, item) for item in segment.mm_items]
        self.histories[i] += segment.token_ids

    def run_turn(self, turn: int) -> float:
        started = time.perf_counter()
        for i, steps in enumerate(self.plan):
            for op in steps[turn]:
                if op[0] in ("message", "prompt") and self.turn_starts[i] is not None:
                    self._append(i, self.processor.close_turn(self.histories[i][self.turn_starts[i] :]))
                    self.turn_starts[i] = None
                if op[0] == "message":
                    self._append(i, self.processor.render_message(op[1], op[2], first=not self.histories[i]))
                elif op[0] == "prompt":
                    self._append(i, self.processor.generation_prompt())
                    self.turn_starts[i] = len(self.histories[i])
                elif op[0] == "image":
                    self._append(i, self.vision.image_segment(op[1]))
                else:
                    self.histories[i] += op[1]
            generated = self._generate(i)
            self.outputs[i].append(generated)
            self.histories[i] += generated
        return time.perf_counter() - started

    @torch.inference_mode()
    def _generate(self, i: int) -> list[int]:
        history, items = self.histories[i], self.items[i]
        ids = torch.tensor([history], device=self.device)
        types = torch.zeros_like(ids, dtype=torch.int32)
        for start, item in items:
            types[0, start : start + item.length] = 1
        pixel_values, grid = self.vision.pixel_values([item.data for _, item in items])
        dtype = next(self.hf_model.parameters()).dtype
        self.tokens_prefilled += len(history)
        self.images_encoded += len(items)
        out = self.hf_model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types,
            pixel_values=pixel_values.to(self.device, dtype), image_grid_thw=grid.to(self.device), do_sample=False,
            max_new_tokens=self.workload.new_tokens, min_new_tokens=self.workload.new_tokens,
            eos_token_id=self.stops, pad_token_id=0,
        )
        return out[0, len(history) :].tolist()


def hf_reference_model(model: str, engine: Engine):
    """The peer: the same weights as the family's transformers model."""
    from transformers.initialization import no_init_weights

    from models.loading import all_shapes, resolve_model_dir

    adapter = engine.adapter
    cls = adapter.family.reference()
    device, dtype = next(adapter.parameters()).device, adapter.dtype
    if model not in all_shapes():
        return cls.from_pretrained(resolve_model_dir(model), dtype=dtype).to(device).eval()
    with torch.device(device), no_init_weights():
        hf_model = cls(adapter.config).to(dtype)
    missing, unexpected = hf_model.load_state_dict(adapter.hf_state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if missing:
        hf_model.tie_weights()
    return hf_model.eval()


def _warm_up(engine: Engine, workload: ImageWorkload) -> None:
    """A prefill with an image and a batched decode, so one-time costs are paid before timing."""
    rng = random.Random(-1)
    sessions = [engine.open_session() for _ in range(2)]
    for i, session in enumerate(sessions):
        session.append([11 + i] * 64)
        page = synthetic_page(rng, workload.page_width, workload.page_height, "warm-up")
        session.append_segment(engine.adapter.vision.image_segment(page))
        engine.submit(session, SamplingParams(max_new_tokens=4, ignore_eos=True))
    engine.run_until_idle()
    for session in sessions:
        session.close()


def _warm_up_hf(hf_model, engine: Engine, workload: ImageWorkload) -> None:
    """The peer's one-time costs too: a `generate` with an image of the workload's size."""
    rng = random.Random(-2)
    vision = engine.adapter.vision
    segment = vision.image_segment(synthetic_page(rng, workload.page_width, workload.page_height, "warm-up"))
    ids = torch.tensor([[11] * 32 + segment.token_ids], device=next(hf_model.parameters()).device)
    types = torch.zeros_like(ids, dtype=torch.int32)
    types[0, 33 : 33 + segment.mm_items[0].length] = 1
    pixel_values, grid = vision.pixel_values([segment.mm_items[0].data])
    with torch.inference_mode():
        hf_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types,
                          pixel_values=pixel_values.to(ids.device, next(hf_model.parameters()).dtype),
                          image_grid_thw=grid.to(ids.device), do_sample=False, max_new_tokens=4, pad_token_id=0)


def run_image_benchmark(model: str, workload: ImageWorkload | None = None, config: EngineConfig | None = None,
                        naive_sessions: int | None = None, progress=None) -> dict:
    """Run Dossier and the naive loop on the same image-heavy workload; return the figures as a dict.

    Args:
        model: a vision-language model folder or shape (e.g. "qwen2.5-vl-small", "qwen2.5-vl-7b").
        workload: sessions, turns, images per turn, page pool, tokens per reply.
        config: engine configuration (image_max_pixels bounds every page's size).
        naive_sessions: run the naive loop on only this many sessions and scale its time (None: all).
        progress: optional callable(str) told what runs now.
    """
    workload = workload or ImageWorkload()
    say = progress or (lambda _msg: None)
    say(f"loading {model}")
    engine = Engine.from_pretrained(model, config or EngineConfig())
    if getattr(engine.adapter, "vision", None) is None:
        from tools.errors import DossierError

        raise DossierError(f"model {model!r} is text-only; --images needs a vision-language model (e.g. qwen2.5-vl-small)")
    plan = build_plan(engine, workload)
    measured = min(naive_sessions or workload.sessions, workload.sessions)
    if progress is None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    hf_model = hf_reference_model(model, engine)
    say("warming up")
    _warm_up(engine, workload)
    _warm_up_hf(hf_model, engine, workload)
    say(f"{workload.sessions} sessions x {workload.turns} turns, {workload.min_images}-{workload.max_images} pages per "
        f"turn; naive peer on {measured} sessions, turns interleaved")
    vision_before = engine.stats()["vision"]
    ours_loop = EngineLoop(engine, workload, plan)
    naive_loop = NaiveLoop(hf_model, engine, workload, plan, measured)
    result = compare(engine, model, workload, ours_loop, {"naive": naive_loop}, measured, say)
    sessions = ours_loop.sessions
    image_tokens = sum(item.length for s in sessions for _, item in s.seq.mm_items)
    pages_shown = sum(len(s.seq.mm_items) for s in sessions)
    prompt_tokens = sum(len(s.seq) for s in sessions)
    result.update({
        "naive_images_encoded": naive_loop.images_encoded,
        "image_token_fraction": round(image_tokens / max(prompt_tokens, 1), 4),
        "pages_shown": pages_shown,
        "image_tokens_per_page": round(image_tokens / max(1, pages_shown), 1),
        "vision": {k: round(v - vision_before[k], 4) if k not in ("encoder_cache_entries", "encoder_cache_mib") else v
                   for k, v in engine.stats()["vision"].items()},
    })
    ours_loop.close()
    return result
