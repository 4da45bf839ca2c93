"""What the Ray tests share: a tiny random Llama saved as a model directory and the sample corpus."""

from __future__ import annotations

from pathlib import Path


def build_tiny_model(folder: Path) -> Path:
    """A 2-layer random Llama with the test tokenizer (tests/engine/conftest.py), saved as an HF directory."""
    from tests.engine.conftest import build_model, build_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    build_model("llama").save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def build_sample(root: Path) -> tuple[Path, Path]:
    """`dossier sample`'s suite, ingested (no OCR) and indexed: (question file, corpus directory)."""
    from engine.datasets.sample import write_sample_suite
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    info = write_sample_suite(root / "sample")
    ingest([info["pdfs"]], root / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(root / "corpus"))
    return Path(info["questions"]), root / "corpus"


if __name__ == "__main__":  # python -m tests.distributed.helpers DIR: build both for a manual run
    import sys

    root = Path(sys.argv[1])
    build_tiny_model(root / "model")
    print(*build_sample(root))
