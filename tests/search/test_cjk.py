"""Chinese text through the normal path: a PDF written in the test (PyMuPDF's built-in "china-s"
font), ingested, indexed and searched. CJK runs are character bigrams, so a two-character
query finds its page, longer ones are phrases, and Boolean operators work as on English."""

import json

import pytest

from tools.corpus import CorpusStore, IngestConfig, ingest
from tools.errors import DossierError
from tools.search import Searcher, build_index, tokens

PAGES = [
    "本公司二零一九年营业收入增长百分之十二，主要来自海外市场。",
    "董事会审议通过了利润分配方案，每股派发现金红利。",
    "股东大会于六月召开，会议讨论了营业收入与利润情况。",
    "FY2019 revenue grew 12% (营收 1,577 百万元).",
]


def _chinese_pdf(path):
    import pymupdf

    doc = pymupdf.open()
    for text in PAGES:
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 80), text, fontsize=12, fontname="china-s")
    doc.save(path)
    return path


@pytest.fixture(scope="module")
def searcher(tmp_path_factory):
    root = tmp_path_factory.mktemp("cjk")
    (root / "pdfs").mkdir()
    _chinese_pdf(root / "pdfs" / "annual_cn.pdf")
    summary = ingest([root / "pdfs"], root / "corpus", IngestConfig(workers=1))
    assert summary.pages == len(PAGES) and summary.needs_ocr == 0
    build_index(CorpusStore(root / "corpus"))
    return Searcher(root / "corpus", backend="reference")


def pages(searcher, query: str) -> list[int]:
    return [hit.page for hit in searcher.search(query, k=10, snippets=False)]


def test_runs_become_bigrams_and_numbers_stay_whole():
    assert tokens("营业收入增长") == ["营业", "业收", "收入", "入增", "增长"]
    assert tokens("FY2019营收1,577元") == ["fy2019", "营收", "1577", "元"]


def test_a_two_character_query_finds_its_page(searcher):
    assert sorted(pages(searcher, "利润")) == [2, 3]
    assert pages(searcher, "海外") == [1]
    assert pages(searcher, "营收") == [4]
    hit = searcher.search("红利", k=1)[0]
    assert hit.page == 2 and "**红利**" in hit.snippet


def test_a_longer_word_matches_its_characters_in_order(searcher):
    assert sorted(pages(searcher, "营业收入")) == [1, 3]
    assert pages(searcher, '"利润分配"') == [2]
    assert pages(searcher, '"分配利润"') == []  # the same characters, another order
    assert pages(searcher, "收入增长") == [1]
    snippet = searcher.search("营业收入", k=1)[0].snippet
    assert "**营业收入**" in snippet, snippet


def test_boolean_operators_on_chinese(searcher):
    assert pages(searcher, "营业收入 利润") == [3]
    assert sorted(pages(searcher, "海外 OR 红利")) == [1, 2]
    assert pages(searcher, "营业收入 NOT 利润") == [1]
    assert sorted(pages(searcher, "(海外 OR 股东) 营业收入")) == [1, 3]
    assert pages(searcher, "revenue 营收") == [4]
    assert pages(searcher, "利* NOT 红利") == [3]


def test_an_old_index_without_cjk_still_loads_and_one_with_cjk_must_be_rebuilt(searcher, tmp_path):
    from tests.pdfs import make_text_store

    build_index(make_text_store(tmp_path / "en", {"a": ["revenue grew"]}))
    meta_path = tmp_path / "en" / "index" / "pages.json"
    meta = json.loads(meta_path.read_text()) | {"analyzer_version": 1}
    meta_path.write_text(json.dumps(meta))
    assert pages(Searcher(tmp_path / "en"), "revenue") == [1]

    cjk_meta = searcher.index.folder / "pages.json"
    saved = cjk_meta.read_text()
    try:
        cjk_meta.write_text(json.dumps(json.loads(saved) | {"analyzer_version": 1}))
        with pytest.raises(DossierError, match="another tokenizer version"):
            Searcher(searcher.index.folder.parent)
    finally:
        cjk_meta.write_text(saved)
