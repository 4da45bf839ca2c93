"""The search studio on a real corpus (FinanceBench by default): search and page-render latency over HTTP.

The studio serves in this process (uvicorn on a loopback port) and is driven over HTTP like a
browser drives it; the same queries also go straight to `AgentEnv.search`, the call the BM25
agent makes, so the web layer's cost is the ratio. Prints:
  - search: the studio's server time per search request (Server-Timing: parse, the agents'
    search, snippets, the fsynced journal line), the tool time inside it, and the round trip,
    p50 / p95 / max over agent-style Boolean queries and the questions as free text; the
    issue's target is < 200 ms server time over FinanceBench's 7,084 pages;
  - render: pages fetched cold (their cached PNG removed first) and again (cached): server
    time and round trip; the target is < 1 s cold.

Usage:
    .venv/bin/python benchmarks/bench_studio.py --corpus DIR [--questions FILE] [--pages 20] [--json]

A --corpus that does not exist yet is built from --pdfs first (ingest + index, as `dossier
ingest` and `dossier index` do; OCR off, which the timing does not depend on).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data" / "financebench"


def _summary(samples_s: list[float]) -> dict:
    from benchmarks.bench_search import _percentiles

    return _percentiles(samples_s) | {"max_ms": round(1000 * max(samples_s), 3)}


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: dict | None = None,
          jar: dict | None = None):
    """(status, body bytes, server seconds from Server-Timing, round-trip seconds) of one request.

    `jar` carries the session cookie sign-in sets: the studio answers an annotator's paths only to the browser
    signed in as that annotator."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if jar and jar.get("cookie"):
        headers["Cookie"] = jar["cookie"]
    start = time.perf_counter()
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    round_trip = time.perf_counter() - start
    timing = response.getheader("server-timing", "app;dur=nan")
    if jar is not None and response.getheader("set-cookie"):
        jar["cookie"] = response.getheader("set-cookie").split(";")[0]
    return response.status, data, float(timing.split("dur=")[1]) / 1000, round_trip


def _build_corpus(pdfs: Path, corpus: Path) -> None:
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    print(f"building {corpus} from {pdfs} (ingest + index; minutes)...", file=sys.stderr)
    ingest([pdfs], corpus, IngestConfig())  # no OCR hook: the text layer only
    build_index(CorpusStore(corpus))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="corpus directory (built from --pdfs if missing)")
    parser.add_argument("--pdfs", type=Path, default=SHARED / "pdfs")
    parser.add_argument("--questions", type=Path, default=SHARED / "financebench_open_source.jsonl")
    parser.add_argument("--benchmark", default="financebench", help="importer for --questions ('canonical': none)")
    parser.add_argument("--pages", type=int, default=20, help="pages to render cold, then cached")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    from benchmarks.bench_search import _agent_queries
    from engine.agents.env import AgentEnv
    from engine.datasets.formats import load_questions, write_jsonl
    from engine.datasets.importers import import_questions
    from engine.studio import StudioConfig, serve_in_thread
    from tools.corpus.render import cache_file

    if not (args.corpus / "dossier.sqlite").is_file():
        _build_corpus(args.pdfs, args.corpus)
    if args.benchmark == "canonical":
        questions, _ = load_questions(args.questions)
    else:
        questions, _ = import_questions(args.benchmark, args.questions)
    queries = [("boolean", q) for q in _agent_queries(questions, random.Random(0))]
    queries += [("free text", " OR ".join(re.findall(r"\w+", q.question))) for q in questions]  # every word OR-ed
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(Path(tmp) / "questions.jsonl", questions)
        config = StudioConfig(args.corpus, Path(tmp) / "questions.jsonl", Path(tmp) / "runs", port=0, k=args.k)
        with serve_in_thread(config) as live:
            stats = live.studio.store.stats()
            result["corpus"] = {"documents": stats["documents"], "pages": stats["pages"]}
            parts = urlsplit(live.url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
            jar: dict = {}
            status, data, _, _ = _call(conn, "POST", "/api/signin", {"name": "bench"}, jar)
            assert status == 200, data
            question_id = json.loads(data)["question"]["id"]
            server, tool, round_trip, seen_pages = {}, {}, {}, []
            for kind, query in queries:
                status, data, server_s, rt_s = _call(conn, "POST", "/api/annotators/bench/search",
                                                     {"question_id": question_id, "query": query}, jar)
                assert status == 200, data
                reply = json.loads(data)
                server.setdefault(kind, []).append(server_s)
                tool.setdefault(kind, []).append(reply["server_ms"] / 1000)
                round_trip.setdefault(kind, []).append(rt_s)
                seen_pages += [(h["document"], h["page"]) for h in reply["hits"]]
            env = AgentEnv(args.corpus)  # the peer: the agents' own call, no web layer
            env.search("revenue", args.k)
            direct: dict[str, list[float]] = {}
            for kind, query in queries:
                start = time.perf_counter()
                env.search(query, args.k)
                direct.setdefault(kind, []).append(time.perf_counter() - start)
            result["search"] = {kind: {"server": _summary(server[kind]), "tool_in_server": _summary(tool[kind]),
                                       "round_trip": _summary(round_trip[kind]),
                                       "agent_env_direct": _summary(direct[kind]),
                                       "server_over_direct_p50": round(statistics.median(server[kind])
                                                                       / statistics.median(direct[kind]), 2)}
                                for kind in server}
            pages = list(dict.fromkeys(seen_pages))[:args.pages]
            conn.close()  # idle through the direct searches: uvicorn has closed the keep-alive connection (5 s)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
            cold, warm, cold_rt, warm_rt = [], [], [], []
            for document, page in pages:
                cached = cache_file(args.corpus / "renders" / document, page, live.studio.render_settings)
                cached.unlink(missing_ok=True)
                path = f"/pages/{quote(document, safe='')}/{page}.png"
                for times, trips in ((cold, cold_rt), (warm, warm_rt)):
                    status, data, server_s, rt_s = _call(conn, "GET", path, jar=jar)
                    assert status == 200 and data[:4] == b"\x89PNG", (path, status)
                    times.append(server_s)
                    trips.append(rt_s)
            result["render"] = {"dpi": config.dpi, "cold_server": _summary(cold), "cold_round_trip": _summary(cold_rt),
                                "cached_server": _summary(warm), "cached_round_trip": _summary(warm_rt)}
            conn.close()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    corpus = result["corpus"]
    print(f"studio on {args.corpus}: {corpus['documents']} documents, {corpus['pages']} pages, top {args.k}")
    for kind, row in result["search"].items():
        s, t, r, d = row["server"], row["tool_in_server"], row["round_trip"], row["agent_env_direct"]
        print(f"search {kind:<9} server p50 {s['p50_ms']} ms p95 {s['p95_ms']} ms max {s['max_ms']} ms "
              f"(tool {t['p50_ms']} ms, round trip {r['p50_ms']} ms; AgentEnv.search direct p50 {d['p50_ms']} ms, "
              f"server/direct {row['server_over_direct_p50']}x; n={s['n']})")
    render = result["render"]
    print(f"render {render['dpi']} dpi  cold server p50 {render['cold_server']['p50_ms']} ms max "
          f"{render['cold_server']['max_ms']} ms (round trip p50 {render['cold_round_trip']['p50_ms']} ms); cached "
          f"server p50 {render['cached_server']['p50_ms']} ms (round trip {render['cached_round_trip']['p50_ms']} ms; "
          f"n={render['cold_server']['n']})")
    worst = max(row["server"]["max_ms"] for row in result["search"].values())
    print(f"targets: search < 200 ms server time: {'met' if worst < 200 else 'NOT met'} (max {worst} ms); "
          f"render < 1 s cold: {'met' if render['cold_server']['max_ms'] < 1000 else 'NOT met'} "
          f"(max {render['cold_server']['max_ms']} ms)")


if __name__ == "__main__":
    main()
