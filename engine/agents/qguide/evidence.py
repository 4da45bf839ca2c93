"""Q-Guide's evidence state: observations o_i = (tool, region, content), running a round, and what the model reads.

A round's calls run concurrently in threads (Appendix C: the round's tool time is the longest
call, not the sum); each yields one observation, in the order the model wrote the calls. A
call that cannot run (unknown tool, bad arguments, a page that does not exist) yields an
observation whose `error` says why, so one bad call costs the agent nothing but that call.
`targeted_lookup` needs the model itself: the round prepares its evidence (crop and region
text) here, and the episode runs the reader as a model turn of its own.

Observations are shown to the model numbered [o1], [o2], ... in the order they were gathered,
each with its tool, page and region; content is cut to `max_chars` characters. Images (a
visual_detail crop, search hits rendered for a vision model) go in as image parts; a text-only
model is told an image was returned that it cannot see.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from engine.agents.protocol import MAX_QUERY_CHARS
from tools.perception import Observation
from tools.perception.lookup import LookupRequest

__all__ = ["run_round", "format_observation", "observation_record", "SEARCH"]

SEARCH = "search"


def _search(env, arguments: dict, k: int, images: bool, dpi: int, max_pixels: int) -> Observation:
    query = arguments.get("query") if isinstance(arguments, dict) else None
    if not isinstance(query, str) or not query.strip():
        return Observation(SEARCH, None, None, None, None, error="search needs a non-empty string 'query'")
    query = query.strip()[:MAX_QUERY_CHARS]
    hits, error = env.search(query, k)
    if error is not None:
        return Observation(SEARCH, None, None, None, None, error=f"search failed: {error}")
    if images:
        hits = env.with_images(hits, dpi, max_pixels)
    return Observation(SEARCH, None, None, None, {"query": query, "hits": hits})


def run_round(calls: list[tuple[str, dict]], toolkit, env, offered: list[str], k: int, images: bool,
              dpi: int, max_pixels: int) -> tuple[list[Observation | LookupRequest], float]:
    """Run one round's calls concurrently.

    Returns:
        (one Observation or LookupRequest per call, in call order; the round's wall seconds).
        A call repeated within the round runs once: its repeats get the same object, shown to the
        model as a pointer to the first (`format_observation`'s `same_as`).
    """
    def one(call: tuple[str, dict]):
        name, arguments = call
        if name not in offered:
            return Observation(str(name), None, None, None, None,
                               error=f"tool {name!r} is not offered here; use one of {', '.join(offered)}")
        if name == SEARCH:
            return _search(env, arguments, k, images, dpi, max_pixels)
        if name == "targeted_lookup":
            return toolkit.prepare_lookup(arguments)
        return toolkit.call(name, arguments)

    start = time.perf_counter()
    keys = [json.dumps([name, arguments], sort_keys=True, default=str) for name, arguments in calls]
    unique = list(dict.fromkeys(keys))  # a call repeated in one round runs once (small models repeat calls)
    by_key = dict(zip(keys, calls))
    if len(unique) == 1:
        done = {unique[0]: one(by_key[unique[0]])}
    else:
        with ThreadPoolExecutor(len(unique), thread_name_prefix="qguide-call") as pool:
            done = dict(zip(unique, pool.map(one, [by_key[key] for key in unique])))
    return [done[key] for key in keys], time.perf_counter() - start


def _round(values) -> list:
    return [round(v, 3) for v in values]


def _table_text(table: dict) -> str:
    rows: dict[int, list[str]] = {}
    for cell in table.get("cells", []):
        marks = []
        if cell.get("color_name") not in (None, "black"):
            marks.append(f"text {cell['color_name']}")
        if cell.get("fill_name") not in (None, "white"):
            marks.append(f"fill {cell['fill_name']}")
        text = cell.get("text", "") + (f" {{{', '.join(marks)}}}" if marks else "")
        rows.setdefault(cell.get("row", 0), []).append(text)
    return "\n".join(" | ".join(cells) for _, cells in sorted(rows.items()))


def _layout_text(layout: dict | None) -> list[str]:
    """The layout as an outline: headings indented by level, then each block's role and first words."""
    if not layout or not layout.get("blocks"):
        return []
    lines = [f"layout: {len(layout['blocks'])} blocks in reading order, {layout['columns']} column(s)"]
    lines += [f"{'  ' * (h['level'] - 1)}# {h['text']} (level {h['level']}, block {h['block']})"
              for h in layout["headings"]]
    for block in layout["blocks"]:
        text = block["text"].replace("\n", " ")
        lines.append(f"[b{block['index']}] {block['role']}: {text[:80]}{' …' if len(text) > 80 else ''}")
    return lines


def _content_text(obs: Observation, vision: bool) -> str:
    """The observation's content as text (images excepted)."""
    content = obs.content or {}
    tool = obs.tool
    if tool == SEARCH:
        blocks = [f"File: {h.document}, Page: {h.page}" + ("" if vision else f"\n{h.text.strip()}")
                  for h in content["hits"]]
        return f"query: {content['query']}\n" + ("\n\n".join(blocks) if blocks else "no pages match this query")
    if tool == "text_recovery":
        return f"text ({content.get('source')}):\n{content.get('text') or '(no text in this region)'}"
    if tool == "visual_detail":
        size = f"{content.get('width')}x{content.get('height')} px"
        return (f"a zoomed image of the region ({size})" if vision else
                f"a zoomed image of the region ({size}); this model reads text only, so it cannot see it")
    if tool == "targeted_lookup":
        confidence = f" (confidence {content['confidence']})" if content.get("confidence") else ""
        return f"question: {content.get('question')}\nanswer: {content.get('answer')}{confidence}"
    if tool == "structure_recovery":
        parts = [f"table {i} ({t.get('rows')}x{t.get('columns')}):\n{_table_text(t)}"
                 for i, t in enumerate(content.get("tables") or [], start=1)]
        parts += [f"{f.get('label')}: {f.get('value')}" for f in content.get("fields") or []]
        parts += _layout_text(content.get("layout"))
        return "\n".join(parts) or "no table, form field or text block found in this region"
    if tool == "spatial_recovery":
        words = content.get("words") or []
        if "corridor" in content:
            return f"text along the line: {content.get('text') or '(none)'}"
        if words and "color_name" in words[0]:
            shown = [f"{w['text']} ({w.get('color_name') or '?'} on {w.get('background_name') or '?'})" for w in words]
            return "words with colours: " + "; ".join(shown)
        return "words at [l, t, r, b]: " + "; ".join(f"{w['text']} {_round(w['box'])}" for w in words)
    return json.dumps(obs.to_json(images="placeholder").get("content"), ensure_ascii=False)


def format_observation(index: int, obs: Observation, vision: bool, max_chars: int, same_as: int | None = None) -> list:
    """One observation as message parts: a labelled text block, then its images (vision models only).

    Args:
        same_as: the index of an earlier observation of this round made by the identical call; the
            block then only points to it.
    """
    if same_as is not None:
        return [f"[o{index}] {obs.tool}: the same call as [o{same_as}]\n"]
    where = []
    if obs.document is not None:
        where.append(f"{obs.document} p.{obs.page}")
    if obs.region is not None and list(obs.region) != [0.0, 0.0, 1.0, 1.0]:
        where.append(f"region {_round(obs.region)}")
    head = f"[o{index}] {obs.tool}" + (" · " + " · ".join(where) if where else "")
    body = f"error: {obs.error}" if obs.error is not None else _content_text(obs, vision)
    if len(body) > max_chars:
        body = body[:max_chars].rstrip() + " …"
    parts: list = [f"{head}\n{body}\n"]
    if vision and obs.error is None:
        images = [h.image for h in obs.content["hits"] if h.image is not None] if obs.tool == SEARCH else obs.images
        for image in images:
            parts += [image, "\n"]
    return parts


def observation_record(obs: Observation) -> dict:
    """The observation for trajectories: page ids and region, images as placeholders, search hits as page ids."""
    if obs.tool == SEARCH and obs.error is None:
        return {"tool": SEARCH, "document": None, "page": None, "region": None,
                "content": {"query": obs.content["query"],
                            "pages": [{"document": h.document, "page": h.page} for h in obs.content["hits"]]}}
    return obs.to_json(images="placeholder")
