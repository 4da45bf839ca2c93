"""Vision agents: search hits shown as rendered page images labelled `File: X, Page: N`."""

import json

import pytest
from PIL import Image

from engine.agents.backend import EngineBackend, ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import load_predictions
from engine.datasets.formats import Evidence, Question
from tests.pdfs import make_pdf
from tools.errors import DossierError

QUESTIONS = [
    Question("q1", "What was revenue in 2019?", [["$48,250"]], [Evidence("report", 1)]),
    Question("q2", "How much does spaghetti cost?", [["$18.00"]], [Evidence("menu", 1)]),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tools.corpus import IngestConfig, ingest
    from tools.search import build_index
    from tools.corpus import CorpusStore

    root = tmp_path_factory.mktemp("vision")
    make_pdf(root / "src" / "report.pdf", ["Revenue in 2019 was $48,250 thousand.", "Capital expenditure was $2,740."])
    make_pdf(root / "src" / "menu.pdf", ["Spaghetti with clams $18.00", "Cold brew $4.50"])
    ingest([root / "src"], root / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(root / "corpus"))
    return root / "corpus"


def _search_then_answer(qid, turn, messages):
    if turn == 1:
        return json.dumps({"tool": "search", "query": "revenue OR spaghetti"})
    return json.dumps({"tool": "answer", "answer": ["x"], "citations": [{"document": "report", "page": 1}]})


def test_hits_are_page_images_labelled_file_and_page(corpus, tmp_path):
    seen = []

    def policy(qid, turn, messages):
        seen.append(messages[-1][1])
        return _search_then_answer(qid, turn, messages)

    settings = AgentSettings(observe="image", image_dpi=100, image_max_pixels=50_000, max_iterations=3)
    env = AgentEnv(corpus)
    summary = RolloutRunner(ScriptedBackend(policy), settings, env, tmp_path / "run").run(QUESTIONS[:1])
    assert summary.reasons == {"answered": 1}
    observation = seen[1]
    assert isinstance(observation, list)
    images = [part for part in observation if isinstance(part, Image.Image)]
    labels = [part for part in observation if isinstance(part, str) and part.startswith("[")]
    assert len(images) == len(labels) == 2  # "revenue OR spaghetti" hits one page of each document
    assert sorted(label.split("] ", 1)[1] for label in labels) == ["File: menu, Page: 1\n", "File: report, Page: 1\n"]
    assert images[0].size == env.page_image("report", 1, 100, 50_000).size
    assert images[0].size[0] * images[0].size[1] <= 50_000  # the cap binds (100 dpi would be ~1M pixels)
    assert "Search results for: revenue OR spaghetti" in observation[0]
    assert "turns left" in observation[-1]
    step = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text())["steps"][1]
    assert "<image " in step["input_delta"] and "File: report, Page: 1" in step["input_delta"]


def test_oracle_shows_gold_pages_as_images(corpus, tmp_path):
    seen = []

    def policy(qid, turn, messages):
        seen.append(messages[-1][1])
        return _search_then_answer(qid, 2, messages)

    settings = AgentSettings(agent="oracle", observe="image", image_dpi=40, image_max_pixels=100_000)
    RolloutRunner(ScriptedBackend(policy), settings, AgentEnv(corpus), tmp_path / "run").run(QUESTIONS)
    for content, question in zip(seen, QUESTIONS):
        (label,) = [p for p in content if isinstance(p, str) and p.startswith("[1]")]
        assert label == f"[1] File: {question.evidence[0].document}, Page: 1\n"
        assert sum(isinstance(p, Image.Image) for p in content) == 1
        assert content[-1].endswith(question.question)


def test_observe_auto_follows_the_model_and_image_needs_a_vision_model():
    assert AgentSettings().resolved(vision=True).observe == "image"
    assert AgentSettings().resolved(vision=False).observe == "text"
    assert AgentSettings(observe="text").resolved(vision=True).observe == "text"
    with pytest.raises(DossierError, match="vision-language model"):
        AgentSettings(observe="image").resolved(vision=False)
    with pytest.raises(DossierError, match="observe"):
        AgentSettings(observe="pictures")


def test_a_tiny_qwen2_vl_agent_sees_pages_through_the_engine(corpus, tmp_path):
    """End to end: the engine's sessions take the page images; repeated pages are encoded once."""
    from tests.vlm.conftest import save_model
    from tests.vlm.test_parity import engine_for

    save_model(tmp_path / "model", "qwen2_vl")
    engine = engine_for(tmp_path / "model", image_max_pixels=84 * 84, num_kv_blocks=4096)
    env = AgentEnv(corpus)
    settings = AgentSettings(agent="oracle", image_dpi=40, image_max_pixels=100_000, max_new_tokens=24).resolved(
        vision=True)
    backend = EngineBackend(engine, settings.max_new_tokens, structured=False)
    questions = QUESTIONS + [Question("q3", "Revenue again?", [["x"]], [Evidence("report", 1)])]
    summary = RolloutRunner(backend, settings, env, tmp_path / "run").run(questions)
    assert summary.episodes == 3 and summary.steps == 3
    vision = engine.stats()["vision"]
    assert vision["images_encoded"] == 2  # report p1 shown twice (q1, q3), menu p1 once
    preds, errors = load_predictions(tmp_path / "run" / "predictions.jsonl")
    assert errors == [] and len(preds) == 3


def test_an_engine_fingerprint_follows_the_pixels_of_the_images_shown(tmp_path):
    """A page image's placeholder tokens depend on its size only: the fingerprint must see its contents."""
    from tests.vlm.conftest import save_model
    from tests.vlm.test_parity import engine_for

    save_model(tmp_path / "model", "qwen2_vl")
    backend = EngineBackend(engine_for(tmp_path / "model", image_max_pixels=84 * 84), 8, structured=False)
    prints = []
    for colour in ("white", "white", "black"):
        session = backend.open("q")
        backend.append(session, [("user", ["File: a, Page: 1", Image.new("RGB", (56, 56), colour)])])
        prints.append((backend.fingerprint(session), list(session.seq.token_ids)))
    assert prints[0][1] == prints[2][1]  # the same tokens: tokens alone would not tell the pages apart
    assert prints[0][0] == prints[1][0] != prints[2][0]
