"""A corpus of synthetic pages with known content, built once per session (ingested without OCR, so
the scan stays unread and the tools OCR its regions on demand)."""

import pytest

from tests.perception.pages import make_documents


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    from tools.corpus import IngestConfig, ingest

    folder = make_documents(tmp_path_factory.mktemp("perception") / "pdfs")
    root = folder.parent / "corpus"
    summary = ingest([folder], root, IngestConfig(workers=1))
    assert summary.documents == 2
    return root


@pytest.fixture(scope="session")
def toolkit(corpus):
    from tools.perception import PerceptionToolkit

    kit = PerceptionToolkit(corpus, ocr="auto")
    yield kit
    kit.close()
