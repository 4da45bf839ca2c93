"""`dossier studio`: the search studio, a local web app where people answer questions with the agents' search tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import CorpusOpt

__all__ = ["register"]


def studio_cmd(
    corpus: CorpusOpt,
    questions: Annotated[Path, typer.Option(help="Canonical question file (JSONL); shown in file order.")],
    out: Annotated[Path, typer.Option(help="Studio directory: one run directory per annotator, OUT/<annotator>/.")],
    host: Annotated[str, typer.Option(help="Interface to bind; anything but loopback needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8300,
    token: Annotated[str | None, typer.Option(help="Secret every request must carry (required off loopback); "
                                                   "default: $DOSSIER_STUDIO_TOKEN.")] = None,
    k: Annotated[int, typer.Option("-k", "--k", help="Pages per search: keep the agents' value to compare.")] = 5,
    search_mode: Annotated[str, typer.Option(help="boolean (MADQA's query language) or bag (free text).")] = "boolean",
    rerank: Annotated[str, typer.Option(help="none, or late (as `dossier run --rerank`).")] = "none",
    dpi: Annotated[int, typer.Option(help="Resolution of page images in the viewer.")] = 150,
    oracle: Annotated[bool, typer.Option("--oracle", help="MADQA's human oracle condition: show each question's "
                                         "gold evidence pages first (the search stays available). Recorded in "
                                         "run.json and every trajectory; `dossier eval` reports it apart.")] = False,
    head_timeout: Annotated[float, typer.Option(help="Seconds a browser has to send a request's headers; the "
                                                     "connection is closed past it.")] = 10.0,
    body_timeout: Annotated[float, typer.Option(help="Seconds a browser has, after the headers, to send a request's "
                                                     "body; the connection is closed past it.")] = 60.0,
    limit_concurrency: Annotated[int, typer.Option(help="Open connections served at once; beyond it new "
                                                        "requests get a 503.")] = 512,
) -> None:
    """Serve the search studio: people answer questions with the BM25 agent's own search tool.

    Annotators sign in by name; each gets a run directory OUT/<name>/ in the agents' schema
    (run.json with agent "human", predictions.jsonl, trajectories.jsonl with every search,
    page view with its dwell time, evidence mark and answer, timestamped; events.jsonl, the
    journal). A refresh or a restart resumes at the next unanswered question. Binds
    127.0.0.1 unless told otherwise; another --host needs --token. Score a person's run
    with `dossier eval OUT/<name>`, and compare it with an agent's with `dossier eval compare`.

    A new annotator is shown a resume code once (it is printed here too): signing in with the
    name and that code continues the run in another browser, or after cookies were cleared.

    With --oracle, each question opens with its gold evidence pages (MADQA's 99.4 % condition,
    where retrieval is solved and only reading is left); questions without gold evidence are
    listed at start and shown without pages. Use another --out than the search condition's.

    Example:
        $ dossier studio --corpus demo/corpus --questions demo/sample/questions.jsonl --out runs/human
        Dossier studio: http://127.0.0.1:8300/  (Ctrl+C stops it)
        corpus demo/corpus: 6 documents, 14 pages · 20 questions · search: top 5, boolean query language
        each annotator's run: runs/human/<name>/ · score one with: dossier eval runs/human/<name>
    """
    from engine.studio import StudioConfig, build_server, studio_url

    config = StudioConfig(corpus=corpus, questions=questions, out=out, host=host, port=port,
                          token=token or os.environ.get("DOSSIER_STUDIO_TOKEN") or None, k=k,
                          search_mode=search_mode, rerank=rerank, dpi=dpi, oracle=oracle,
                          head_timeout_s=head_timeout, body_timeout_s=body_timeout,
                          limit_concurrency=limit_concurrency)
    typer.echo("loading the corpus and its search index...", err=True)
    server, studio = build_server(config)
    studio.announce = typer.echo
    if studio.oracle_problems:
        typer.echo(f"oracle condition: {len(studio.oracle_problems)} of {len(studio.questions)} questions show "
                   "fewer than their gold pages:", err=True)
        for line in studio.oracle_problems:
            typer.echo(f"  {line}", err=True)
    stats = studio.store.stats()
    original_startup = server.startup

    async def startup(sockets=None):  # print the URL once the socket is bound (the real port when --port 0)
        await original_startup(sockets)
        if server.started:
            from engine.studio.server import bound_port

            url = studio_url(config.host, bound_port(server), config.token)
            typer.echo(f"Dossier studio: {url}  (Ctrl+C stops it)")
            typer.echo(f"corpus {corpus}: {stats['documents']} documents, {stats['pages']} pages · "
                       f"{len(studio.questions)} questions · search: top {config.k}, "
                       f"{'boolean query language' if config.search_mode == 'boolean' else 'free text'}"
                       + (" · oracle condition: gold pages shown first" if oracle else ""))
            typer.echo(f"each annotator's run: {out}/<name>/ · score one with: dossier eval {out}/<name>")

    server.startup = startup
    server.run()


def register(app: typer.Typer) -> None:
    app.command("studio")(studio_cmd)
