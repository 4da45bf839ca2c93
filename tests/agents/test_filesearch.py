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


def test_dossier_eval_counts_the_retrieval_as_each_questions_one_search(tmp_path, monkeypatch):
    from engine.eval.inputs import load_inputs

    monkeypatch.setattr(filesearch.FileSearchEpisode, "embedder", BagEmbedder())
    given = {"q1": "$48,250", "q2": "unknown", "q3": "$2,740"}  # q2 wrong

    def reader(qid, turn, messages):
        return json.dumps({"tool": "answer", "answer": [given[qid]], "citations": [{"document": "report", "page": 1}]})

    env = AgentEnv(build_corpus(tmp_path / "c"))
    settings = AgentSettings(agent="filesearch", max_chunk_size_tokens=100, chunk_overlap_tokens=0, max_num_results=1)
    out = tmp_path / "run"
    RolloutRunner(ScriptedBackend(reader), settings, env, out).run(questions(3))
    # what `dossier eval predictions.jsonl --gold ... --trajectories trajectories.jsonl` reads
    inputs = load_inputs(out / "predictions.jsonl", _gold(tmp_path), out / "trajectories.jsonl")
    result = evaluate(inputs.questions, inputs.predictions, inputs.episodes, EvalConfig(bootstrap=0))
    report = result.report
    searches = {e.id: e.searches for e in inputs.episodes}
    # the retrieval with the question, recorded in the first step, is the episode's one search (MADQA counts
    # each retrieval-tool call), with the pages its chunk spans: q2's is the menu's, the others the report's
    assert {q: [(s.query, [(p.document, p.page) for p in s.pages]) for s in found] for q, found in searches.items()} \
        == {"q1": [("What was revenue in 2019?", [("report", 1), ("report", 2), ("report", 3)])],
            "q2": [("How much does spaghetti cost?", [("menu", 1), ("menu", 2)])],
            "q3": [("What was capital expenditure?", [("report", 1), ("report", 2), ("report", 3)])]}
    assert report["behaviour"]["searches_per_question"] == 1.0
    # the answer came after that search: none at budget 0, both right answers at budget 1
    assert [(r["budget"], r["correct"]) for r in report["steps"]["accuracy_at_budget"]] == [(0, 0), (1, 2)]
    assert report["steps"]["first_query"] == {"page_hit_rate": 1.0, "doc_hit_rate": 1.0, "page_hits": 3,
                                              "doc_hits": 3, "n": 3}
    assert report["steps"]["cumulative_hits"]["iterations"] == [{"i": 1, "doc_rate": 1.0, "page_rate": 1.0, "doc_hits": 3,
                                                                 "page_hits": 3}]
    # the steps Kuiper's effort is that same count; one retrieval for every question (MADQA: a non-agentic
    # system's budget is fixed at one retrieval step) leaves nothing to order by, and the report says so
    assert [i.effort for i in result.items] == [len(searches[i.id]) for i in result.items] == [1, 1, 1]
    assert report["kuiper"] is None and "the same effort (1)" in report["kuiper_undefined"]
    assert report["effort_measures"]["measures"]["steps"]["n"] == 3


def _gold(tmp_path):
    path = tmp_path / "gold.jsonl"
    path.write_text("".join(json.dumps(q.to_json()) + "\n" for q in questions(3)))
    return path


@pytest.mark.parametrize("values, message", [({"max_chunk_size_tokens": 50}, "100 to 4096"),
                                             ({"chunk_overlap_tokens": 500}, "half of --max-chunk-size-tokens"),
                                             ({"max_num_results": 0}, "at least 1")])
def test_bad_chunking_is_refused_naming_the_flag(values, message):
    with pytest.raises(DossierError, match=message):
        AgentSettings(agent="filesearch", **values)


def test_defaults_are_openais_documented_ones():
    s = AgentSettings(agent="filesearch")
    assert (s.max_chunk_size_tokens, s.chunk_overlap_tokens, s.max_num_results) == (800, 400, 20)


class CountingEmbedder(BagEmbedder):
    """BagEmbedder that counts the texts it embeds and can fail after some calls (an interrupted build)."""

    name = "bag-64"

    def __init__(self, fail_after=None):
        self.texts, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, texts):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.texts += len(texts)
        return super().__call__(texts)


def test_chunk_vectors_are_cached_in_the_corpus_and_an_interrupted_build_resumes(tmp_path):
    from tools.corpus.store import CorpusStore

    store = CorpusStore(build_corpus(tmp_path / "c"))
    cache = tmp_path / "c" / "filesearch"
    key = {"fingerprint": "f", "size": 8, "overlap": 0, "embedder": "bag-64", "chunks": 5}
    texts = [f"chunk {i} revenue" for i in range(5)]
    with pytest.raises(KeyboardInterrupt):  # stopped after two batches of two: those four are kept
        filesearch._embed_chunks(CountingEmbedder(fail_after=2), texts, key, cache / "x", batch=2, save_every=0)
    assert json.loads((cache / "x.json").read_text())["done"] == 4
    resumed = CountingEmbedder()
    vectors = filesearch._embed_chunks(resumed, texts, key, cache / "x", batch=2, save_every=0)
    assert resumed.texts == 1 and np.allclose(vectors, BagEmbedder()(texts))
    again = CountingEmbedder()
    assert np.allclose(filesearch._embed_chunks(again, texts, key, cache / "x", batch=2), vectors) and again.texts == 0
    other = CountingEmbedder()  # another corpus text (fingerprint): embedded afresh
    filesearch._embed_chunks(other, texts, key | {"fingerprint": "g"}, cache / "x", batch=2)
    assert other.texts == 5

    built = CountingEmbedder()
    index = filesearch.ChunkIndex(store, 100, 0, built, cache)
    assert built.texts == len(index.chunks) > 0
    reread = CountingEmbedder()
    assert np.allclose(filesearch.ChunkIndex(store, 100, 0, reread, cache).vectors, index.vectors)
    assert reread.texts == 0 and (cache / "chunks-100-0.npy").is_file()
