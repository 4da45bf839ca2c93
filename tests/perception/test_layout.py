"""The structure tool's layout (kind="layout"): blocks in reading order over two columns, their roles,
heading levels from size and numbering, and the sections they open, on a page made in the test."""

import pytest

from tools.perception.hierarchy import page_layout

LEFT = ["Harbor dredging lowered the berth depth to", "twelve metres across the whole northern quay,",
        "so the larger ships can now berth at low tide."]
RIGHT = ["Ferry traffic rose by a fifth after the new", "timetable began in the spring, with two more",
         "crossings every weekday and one on Sundays."]


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory):
    import pymupdf

    from tools.corpus import IngestConfig, ingest
    from tools.perception import PerceptionToolkit

    root = tmp_path_factory.mktemp("layout")
    (root / "pdfs").mkdir()
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((60, 70), "Port Annual Review", fontsize=22, fontname="hebo")
    page.insert_text((60, 120), "1 Introduction", fontsize=15, fontname="hebo")
    for i, line in enumerate(["The port handled more ships than ever before in its history,",
                              "with container volumes up and bulk cargo steady all year."]):
        page.insert_text((60, 145 + 13 * i), line, fontsize=10)
    page.insert_text((60, 200), "1.1 Scope", fontsize=12, fontname="hebo")
    page.insert_text((60, 222), "This review covers the calendar year and all four terminals.", fontsize=10)
    page.insert_text((60, 270), "2 Operations", fontsize=15, fontname="hebo")
    for i, (left, right) in enumerate(zip(LEFT, RIGHT)):  # two columns with aligned baselines
        page.insert_text((60, 300 + 13 * i), left, fontsize=10)
        page.insert_text((320, 300 + 13 * i), right, fontsize=10)
    page.insert_text((60, 380), "Figure 1: berth depths in metres, surveyed in March by the harbour authority "
                                "across all four terminals of the port and its two outer anchorages.", fontsize=6.5)
    doc.save(root / "pdfs" / "review.pdf")
    ingest([root / "pdfs"], root / "corpus", IngestConfig(workers=1))
    kit = PerceptionToolkit(root / "corpus", ocr="auto")
    yield kit
    kit.close()


def test_layout_reports_headings_by_level_sections_and_reading_order(toolkit):
    obs = toolkit.call("structure_recovery", {"document": "review", "page": 1, "kind": "layout"})
    assert obs.error is None and set(obs.content) == {"source", "layout"}
    layout = obs.content["layout"]
    heads = [(h["text"], h["level"]) for h in layout["headings"]]
    assert heads == [("Port Annual Review", 1), ("1 Introduction", 2), ("1.1 Scope", 3), ("2 Operations", 2)]
    texts = [b["text"].replace("\n", " ") for b in layout["blocks"]]
    left, right = texts.index(" ".join(LEFT)), texts.index(" ".join(RIGHT))
    assert left + 1 == right  # the left column is read whole before the right one
    assert layout["columns"] == 2
    roles = {b["text"].split()[0]: b["role"] for b in layout["blocks"]}
    assert roles["Figure"] == "caption" and roles["The"] == "paragraph" and roles["Harbor"] == "paragraph"
    sections = {s["text"]: s for s in layout["sections"]}
    index = [s["text"] for s in layout["sections"]]
    assert sections["1.1 Scope"]["parent"] == index.index("1 Introduction")
    assert sections["2 Operations"]["parent"] == index.index("Port Annual Review")
    assert [texts[i].split()[0] for i in sections["2 Operations"]["blocks"]] == ["Harbor", "Ferry", "Figure"]
    assert all(0 <= v <= 1 for b in layout["blocks"] for v in b["box"])


def test_all_includes_the_layout_and_an_empty_region_has_none(toolkit):
    obs = toolkit.call("structure_recovery", {"document": "review", "page": 1})
    assert {"tables", "fields", "layout"} <= set(obs.content)
    empty = toolkit.call("structure_recovery", {"document": "review", "page": 1, "region": [0.9, 0.9, 1, 1],
                                                "kind": "layout"})
    assert empty.content["layout"] == {"blocks": [], "headings": [], "sections": [], "columns": 0}


def test_the_outline_the_agent_reads(toolkit):
    from engine.agents.qguide.evidence import format_observation

    obs = toolkit.call("structure_recovery", {"document": "review", "page": 1, "kind": "layout"})
    text = "".join(format_observation(1, obs, False, 4000))
    assert "# Port Annual Review (level 1" in text and "    # 1.1 Scope (level 3" in text
    assert "caption: Figure 1" in text and "2 column(s)" in text


def test_no_words_no_blocks():
    assert page_layout(None, []) == {"blocks": [], "headings": [], "sections": [], "columns": 0}
