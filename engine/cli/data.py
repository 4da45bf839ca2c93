"""`dossier import` (benchmark question files → canonical) and `dossier sample` (the generated sample suite)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import FormatOpt, OutputFormat, emit_json

__all__ = ["register"]


class Benchmark(str, Enum):
    madqa = "madqa"
    financebench = "financebench"
    mmlongbench = "mmlongbench"
    mudabench = "mudabench"
    docvqa2026 = "docvqa2026"


def import_cmd(
    benchmark: Annotated[Benchmark, typer.Argument(help="The source benchmark's format.")],
    source: Annotated[Path, typer.Argument(help="The benchmark's native question file (JSONL or JSON list).")],
    out: Annotated[Path, typer.Option(help="Canonical question file to write (JSONL).")],
    pdfs: Annotated[Path | None, typer.Option(help="docvqa2026: also write each document's page images as "
                                                   "PDFS/<doc_id>.pdf, ready for `dossier ingest`.")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Convert a benchmark's question file to the canonical format (MADQA's; pages 1-indexed).

    FinanceBench pages are 0-indexed and become 1-indexed; MMLongBench-Doc's
    evidence_pages strings ("[5, 6]") become page lists; document ids are PDF file stems.
    DocVQA-2026 records (val.parquet or a JSON export) hold one document and its questions:
    each question names its document (`document`), and `--pdfs DIR` turns the page images
    into image-only PDFs. Malformed items are reported with their line or item number and skipped.

    Example:
        $ dossier import financebench financebench_open_source.jsonl --out q.jsonl
        wrote 100 questions to q.jsonl (0 skipped)
        $ dossier import docvqa2026 val.parquet --out docvqa.jsonl --pdfs docvqa-pdfs
        wrote 80 questions to docvqa.jsonl (0 skipped); 16 documents: 16 PDFs written (1,208 pages), 0 kept
    """
    from engine.datasets import write_jsonl
    from engine.datasets.importers import import_questions
    from tools.errors import DossierError

    info = None
    if benchmark is Benchmark.docvqa2026:
        from engine.datasets.docvqa2026 import import_docvqa2026

        questions, errors, info = import_docvqa2026(source, pdfs)
    elif pdfs is not None:
        raise DossierError(f"--pdfs is for docvqa2026 (whose documents come as page images); {benchmark.value} "
                           "documents are PDFs already")
    else:
        questions, errors = import_questions(benchmark.value, source)
    write_jsonl(out, questions)
    if fmt is OutputFormat.json:
        emit_json({"questions": len(questions), "out": str(out), **({"documents": info} if info else {}),
                   "skipped": [{"line": e.line, "reason": e.reason} for e in errors]})
        return
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    line = f"wrote {len(questions)} questions to {out} ({len(errors)} skipped)"
    if info is not None and pdfs is not None:
        plural = lambda n, word: f"{n:,} {word}" + ("" if n == 1 else "s")  # noqa: E731
        line += (f"; {plural(info['documents'], 'document')}: {plural(info['pdfs_written'], 'PDF')} written "
                 f"({plural(info['pages'], 'page')}), {info['pdfs_kept']} kept")
    typer.echo(line)


class Suite(str, Enum):
    default = "default"
    qguide = "qguide"
    mudabench = "mudabench"


def sample_cmd(
    out: Annotated[Path, typer.Option(help="Folder to write pdfs/ and questions.jsonl into.")],
    suite: Annotated[Suite, typer.Option(help="default: 6 everyday documents, 20 questions; qguide: posters, "
                                              "drawings, a long report and a map with Q-Guide's hard cases; "
                                              "mudabench: 12 company reports (two in Chinese) with "
                                              "metadata.jsonl, conversion.json and 14 analytical questions with "
                                              "gold facts (for --agent workflow).")]
    = Suite.default,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Write a small realistic sample collection made by the project, with questions and gold pages.

    default: two annual reports with financial tables, a membership form, a café menu, a memo and
    a scanned notice (an image-only page); single-page, cross-page and cross-document questions.
    qguide: a science poster (a red table value, a 5 pt caption), an engineering drawing (tiny
    dimensions, one written vertically), an 8-page quarterly report (a highlighted row, a rotated
    margin note, a red figure) and a tram map (names along a diagonal line); each question names
    its document, DocVQA-2026 style, and one has no answer ("Unknown").
    mudabench: annual reports of four invented companies for 2022 and 2023 (in thousands or in
    millions of US dollars, with the auditor's name), two sustainability reports, a Chinese
    A-share company's two annual reports in yuan, metadata.jsonl with each document's company,
    sector, year and report type, conversion.json (the yuan's rate), and analytical questions
    over several documents each (averages, sums, growth, arg-max, a categorical fact, a
    two-column record, a currency conversion, one in Chinese) with MuDABench-shaped gold facts.
    Use them to try every command without data of your own.

    Example:
        $ dossier sample --out sample
        wrote 6 documents (14 pages) to sample/pdfs and 20 questions to sample/questions.jsonl
        $ dossier sample --suite qguide --out qg
        wrote 4 documents (11 pages) to qg/pdfs and 13 questions to qg/questions.jsonl
        $ dossier sample --suite mudabench --out muda
        wrote 12 documents (32 pages) to muda/pdfs, their metadata to muda/metadata.jsonl and 14 questions to muda/questions.jsonl
    """
    if suite is Suite.qguide:
        from engine.datasets.sample_qguide import write_qguide_suite as write
    elif suite is Suite.mudabench:
        from engine.datasets.sample_mudabench import write_mudabench_sample as write
    else:
        from engine.datasets.sample import write_sample_suite as write

    info = write(out)
    if fmt is OutputFormat.json:
        emit_json(info)
        return
    meta = f", their metadata to {info['metadata']}" if "metadata" in info else ""
    typer.echo(f"wrote {info['documents']} documents ({info['pages']} pages) to {info['pdfs']}{meta} "
               f"and {info['question_count']} questions to {info['questions']}")


def register(app: typer.Typer) -> None:
    app.command("import")(import_cmd)
    app.command("sample")(sample_cmd)
