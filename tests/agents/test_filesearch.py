"""The file-search baseline: chunking with page spans, nearest chunks shown, one answer turn citing pages."""

import json
import re

import numpy as np
import pytest

from engine.agents import filesearch
from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.filesearch import chunk_document
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.eval import EvalConfig, evaluate
from tests.agents.scripted import build_corpus, questions
from tools.errors import DossierError


def words(text):
    """A stand-in tokenizer: each word is a token, as (start, end) offsets."""
    return [m.span() for m in re.finditer(r"\S+", text)]


class BagEmbedder:
    """A stand-in for MiniLM: hashed bag of lower-cased words, L2-normalised (shared words -> close vectors)."""

    offsets = staticmethod(words)

    def __call__(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9$,.]+", text.lower()):
                out[row, sum(map(ord, word.strip(".,"))) % 64] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_chunks_are_windows_with_overlap_and_name_the_pages_they_span():
    pages = [" ".join(f"a{i}" for i in range(6)), " ".join(f"b{i}" for i in range(6))]
    chunks = chunk_document("doc", pages, words, size=6, overlap=2)
    # tokens: "[Page" "1]" a0..a5 "[Page" "2]" b0..b5 = 16 words; windows of 6 every 4: 0-5, 4-9, 8-13, 12-15
    assert [(c.first_page, c.last_page) for c in chunks] == [(1, 1), (1, 2), (2, 2), (2, 2)]
    assert chunks[1].text.startswith("[Page 1]\na2 a3 a4 a5") and chunks[1].label() == "File: doc, Pages: 1-2"
    assert chunks[3].text == "[Page 2]\nb2 b3 b4 b5"  # a chunk starting inside a page repeats its marker
    assert chunks[-1].text.endswith("b5")


def test_the_nearest_chunks_are_shown_once_and_the_answer_cites_a_page(tmp_path, monkeypatch):
    monkeypatch.setattr(filesearch.FileSearchEpisode, "embedder", BagEmbedder())
    seen = []

    def reader(qid, turn, messages):
        seen.append(messages[-1][1])
        page = 2 if "capital" in messages[-1][1].split("Question:")[1] else 1
        doc = "menu" if "spaghetti" in messages[-1][1].split("Question:")[1] else "report"
        return json.dumps({"tool": "answer", "answer": ["x"], "citations": [{"document": doc, "page": page}]})

    env = AgentEnv(build_corpus(tmp_path / "c"))
    settings = AgentSettings(agent="filesearch", max_chunk_size_tokens=100, chunk_overlap_tokens=0, max_num_results=1)
    out = tmp_path / "run"
    summary = RolloutRunner(ScriptedBackend(reader), settings, env, out).run(questions(3))
    assert summary.reasons == {"answered": 3} and len(seen) == 3  # one model turn per question
    assert "File: menu, Pages: 1-2" in seen[1] and "Spaghetti with clams" in seen[1] and "Revenue" not in seen[1]
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    first = {r["id"]: r["steps"][0] for r in records}
    assert first["q2"]["retrieved"]["chunks"][0]["document"] == "menu"
    assert first["q2"]["retrieved"]["pages"] == [{"document": "menu", "page": 1}, {"document": "menu", "page": 2}]
    from engine.datasets import load_predictions
    from engine.eval.trajectories import load_trajectories

    result = evaluate(questions(3), load_predictions(out / "predictions.jsonl")[0],
                      load_trajectories(out / "trajectories.jsonl")[0], EvalConfig())
    assert {i.id: i.page_f1 for i in result.items} == {"q1": 1.0, "q2": 1.0, "q3": 1.0}


@pytest.mark.parametrize("values, message", [({"max_chunk_size_tokens": 50}, "100 to 4096"),
                                             ({"chunk_overlap_tokens": 500}, "half of --max-chunk-size-tokens"),
                                             ({"max_num_results": 0}, "at least 1")])
def test_bad_chunking_is_refused_naming_the_flag(values, message):
    with pytest.raises(DossierError, match=message):
        AgentSettings(agent="filesearch", **values)


def test_defaults_are_openais_documented_ones():
    s = AgentSettings(agent="filesearch")
    assert (s.max_chunk_size_tokens, s.chunk_overlap_tokens, s.max_num_results) == (800, 400, 20)
