"""OCR benchmark: every installed backend on the scanned samples, side by side in one run.

For each backend (rapidocr, tesseract, surya when configured) it prints:
  - character accuracy on ocrmypdf_linn.pdf against ocrmypdf_linn.txt: 1 - Levenshtein distance /
    reference length, after normalising both texts (Unicode NFKC, typographic quotes and dashes to
    ASCII, every whitespace run to one space; case and punctuation kept) — see tools/ocr/accuracy.py.
    The reference is itself an OCR transcript (tesseract's, with '0' for bullets), so ~0.99 is the ceiling;
  - pages/s reading the four scanned samples one page at a time in this process (render + OCR),
    and through ingest's OCR step (`OcrStep`, parallel worker processes, one per core);
  - whether each sample becomes searchable: after ingest + index, a BM25 search for a word printed
    on it returns it (skew is linn scanned askew, so 'Tarzana' finds both);
  - the ratio of its sequential pages/s to tesseract's (the engine ocrmypdf uses), the peer.

Absolute times depend on the machine and its load; compare the ratios.

Usage:
    .venv/bin/python benchmarks/bench_ocr.py [--samples DIR] [--dpi 150] [--backends rapidocr,tesseract] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

SAMPLES = ROOT.parent / "shared" / "data" / "pdf-samples"
SCANS = {  # sample -> a word printed on it (what a user would search for)
    "ocrmypdf_linn": "LinnSequencer",
    "ocrmypdf_c02-22": "Watson",
    "ocrmypdf_skew": "Tarzana",
    "ocrmypdf_2400dpi": "kruidnagel",
}


def sequential(backend_name: str, samples: Path, dpi: int) -> dict:
    """Read every sample page in this process, one at a time; warm the backend up first."""
    from PIL import Image

    from tools.ocr import OcrSettings, char_accuracy, get_backend, ocr_pdf_page

    settings = OcrSettings(backend=backend_name, dpi=dpi)
    backend = get_backend(backend_name)
    try:
        backend.read(Image.new("RGB", (200, 60), "white"))  # load models before timing
        texts, seconds = {}, {}
        for name in SCANS:
            start = time.perf_counter()
            texts[name] = ocr_pdf_page(backend, samples / f"{name}.pdf", 1, settings).text
            seconds[name] = time.perf_counter() - start
    finally:
        backend.close()
    reference = (samples / "ocrmypdf_linn.txt").read_text(encoding="utf-8")
    return {"linn_char_accuracy": round(char_accuracy(texts["ocrmypdf_linn"], reference), 4),
            "seconds_per_page": {k: round(v, 2) for k, v in seconds.items()},
            "pages_per_second": round(len(SCANS) / sum(seconds.values()), 3)}


def through_ingest(backend_name: str, samples: Path, dpi: int) -> dict:
    """Ingest the samples with OCR (parallel workers), index, and search a known word per sample."""
    from tools.corpus import IngestConfig, ingest
    from tools.ocr import OcrSettings, OcrStep
    from tools.search import Searcher, build_index

    with tempfile.TemporaryDirectory(prefix="bench-ocr-") as tmp:
        step = OcrStep(OcrSettings(backend=backend_name, dpi=dpi))
        summary = ingest([samples / f"{name}.pdf" for name in SCANS], Path(tmp) / "c", IngestConfig(ocr=step))
        from tools.corpus import CorpusStore

        build_index(CorpusStore(Path(tmp) / "c"))
        searcher = Searcher(Path(tmp) / "c")
        searchable = {}
        for name, word in SCANS.items():
            hits = searcher.search(word, k=5)
            searchable[name] = name in [hit.document for hit in hits]
    return {"ingest_ocr_pages_per_second": round(summary.ocr_pages / summary.ocr_seconds, 3) if summary.ocr_seconds else 0.0,
            "ingest_ocr_errors": summary.ocr_errors, "searchable": searchable}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=Path, default=SAMPLES, help="folder with the ocrmypdf_* samples")
    parser.add_argument("--dpi", type=int, default=150, help="render resolution for OCR")
    parser.add_argument("--backends", default="", help="comma-separated; default: every installed backend")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args()
    from tools.ocr import backend_status

    status = backend_status()
    wanted = [b for b in args.backends.split(",") if b] or [name for name, reason in status.items() if reason is None]
    results = {}
    for name in wanted:
        if status.get(name):
            results[name] = {"skipped": status[name]}
            continue
        results[name] = {**sequential(name, args.samples, args.dpi), **through_ingest(name, args.samples, args.dpi)}
    peer = results.get("tesseract", {}).get("pages_per_second")
    for row in results.values():
        if peer and "pages_per_second" in row:
            row["ratio_to_tesseract"] = round(row["pages_per_second"] / peer, 3)
    report = {"dpi": args.dpi, "cpus": os.cpu_count(), "backends": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"OCR on {len(SCANS)} scanned samples at {args.dpi} dpi ({os.cpu_count()} CPUs); "
          "accuracy = 1 - edit distance / length on NFKC, quote/dash-folded, whitespace-collapsed text")
    for name, row in results.items():
        if "skipped" in row:
            print(f"{name:<10} skipped: {row['skipped']}")
            continue
        found = ", ".join(f"{k.removeprefix('ocrmypdf_')} {'yes' if v else 'NO'}" for k, v in row["searchable"].items())
        ratio = f"  ratio {row['ratio_to_tesseract']:.2f}x tesseract" if "ratio_to_tesseract" in row else ""
        print(f"{name:<10} linn accuracy {row['linn_char_accuracy']:.4f}  {row['pages_per_second']:.2f} pages/s sequential"
              f"  {row['ingest_ocr_pages_per_second']:.2f} pages/s ingest{ratio}")
        print(f"{'':<10} searchable: {found}  (s/page: "
              + ", ".join(f"{k.removeprefix('ocrmypdf_')} {v}" for k, v in row["seconds_per_page"].items()) + ")")


if __name__ == "__main__":
    main()
