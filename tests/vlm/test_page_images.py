"""Page images from the corpus store shown to a VL model, labelled `File: {document}, Page: {page}`."""

import pytest

from engine import SamplingParams
from engine.agents.page_images import page_image_message
from tests.pdfs import make_pdf
from tests.vlm.test_parity import engine_for
from tools.corpus import CorpusStore, IngestConfig, RenderSettings, ingest
from tools.errors import DossierError


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    make_pdf(root / "src" / "report.pdf", ["Revenue was $1,577 million in 2019.", "Operating income by segment."])
    ingest([root / "src"], root / "corpus", IngestConfig(workers=1))
    return CorpusStore(root / "corpus")


def test_search_hits_become_labelled_page_images(store, tmp_path):
    from tests.vlm.conftest import save_model

    save_model(tmp_path, "qwen2_vl")
    engine = engine_for(tmp_path, image_max_pixels=84 * 84)
    settings = RenderSettings(dpi=30, max_pixels=200_000)
    parts = page_image_message(store, [("report", 1), ("report", 2), ("report", 1)], settings, text="Search results:\n")
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert "File: report, Page: 2\n" in texts and texts[0] == "Search results:\n"
    images = [p["image"] for p in parts if p["type"] == "image"]
    assert images[0].mode == "RGB" and images[0].size == store.render("report", 1, settings).size
    cost = sum(engine.processor.image_tokens(image) for image in images)
    session = engine.open_session()
    before = session.num_tokens
    session.append_message("user", parts)
    text_tokens = len(engine.processor.render_message("user", "".join(texts), first=True).token_ids)
    assert session.num_tokens - before == text_tokens + cost
    session.append_generation_prompt()
    session.generate(SamplingParams(max_new_tokens=2, ignore_eos=True))
    assert engine.stats()["vision"]["images_encoded"] == 2  # page 1 twice: one encoding (same pixels, same size)


def test_an_unknown_page_names_itself(store):
    with pytest.raises(DossierError, match="page 9"):
        page_image_message(store, [("report", 9)])
