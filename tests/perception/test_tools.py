"""Each perception tool on synthetic pages with known content (tests/perception/pages.py)."""

import numpy as np
import pytest

from tests.perception.pages import DIAGONAL, HEIGHT, TABLE, WIDTH, table_region

RED_VALUE = [220 / WIDTH, 156 / HEIGHT, 330 / WIDTH, 184 / HEIGHT]  # the cell of "5,310"
BLACK_VALUE = [330 / WIDTH, 156 / HEIGHT, 440 / WIDTH, 184 / HEIGHT]  # the cell of "4,870"
LABEL = [0.75, 0.92, 1.0, 0.97]  # around the 4.5 pt "Ref. QX-17"


def _grid(table):
    grid = [[""] * table["columns"] for _ in range(table["rows"])]
    for cell in table["cells"]:
        grid[cell["row"]][cell["column"]] = cell["text"]
    return grid


def _cell(table, text):
    return next(c for c in table["cells"] if c["text"] == text)


# -- text recovery --------------------------------------------------------------------------------
def test_text_recovery_reads_a_small_label_from_the_text_layer(toolkit):
    obs = toolkit.call("text_recovery", {"document": "report", "page": 2, "region": LABEL})
    assert obs.ok and obs.content["text"] == "Ref. QX-17" and obs.content["source"] == "pdf"
    assert obs.region == LABEL and obs.document == "report" and obs.page == 2


def test_text_recovery_reads_a_region_of_an_unread_scan_by_ocr(toolkit):
    obs = toolkit.call("text_recovery", {"document": "scan", "page": 1, "region": table_region()})
    assert obs.ok and obs.content["source"].startswith("ocr:")
    lines = obs.content["text"].splitlines()
    assert "Net income 5,310 4,870" in lines or ("Net income" in obs.content["text"] and "5,310" in obs.content["text"])
    assert 0.5 < obs.content["confidence"] <= 1


def test_text_recovery_in_reading_order_and_empty_blank_regions(toolkit):
    obs = toolkit.call("text_recovery", {"document": "report", "page": 3, "region": [0, 0, 1, 0.33]})
    text = obs.content["text"]
    assert text.index("Full name") < text.index("Member ID") < text.index("Monthly fee")
    blank = toolkit.call("text_recovery", {"document": "report", "page": 3, "region": [0.1, 0.6, 0.9, 0.7]})
    assert blank.ok and blank.content["text"] == "" and blank.content["source"] == "pdf"  # no ink: no OCR


# -- visual detail --------------------------------------------------------------------------------
def _red_share(image):
    pixels = np.asarray(image).reshape(-1, 3).astype(int)
    return float(np.mean((pixels[:, 0] > 150) & (pixels[:, 1] < 80) & (pixels[:, 2] < 80)))


def test_visual_detail_returns_a_padded_upscaled_crop(toolkit):
    obs = toolkit.call("visual_detail", {"document": "report", "page": 1, "region": RED_VALUE, "size": 800})
    image = obs.content["image"]
    assert obs.ok and max(image.size) == 800 and obs.images == [image]
    assert obs.content["padded_region"][0] == pytest.approx(RED_VALUE[0] - 0.02, abs=1e-3)
    assert _red_share(image) > 0.003  # the red value is in the crop
    black = toolkit.call("visual_detail", {"document": "report", "page": 1, "region": BLACK_VALUE, "padding": 0})
    assert max(black.content["image"].size) == 1024 and _red_share(black.content["image"]) == 0
    tiny = toolkit.call("visual_detail", {"document": "report", "page": 2, "region": [0.8, 0.945, 0.84, 0.955],
                                          "padding": 0})
    assert max(tiny.content["image"].size) == 1024  # past max_zoom, upscaled to the target
    assert obs.to_json()["content"]["image"] == "<image 800×323 px>" or "<image 800×" in obs.to_json()["content"]["image"]


# -- spatial recovery -----------------------------------------------------------------------------
def test_spatial_words_locate_a_phrase(toolkit):
    obs = toolkit.call("spatial_recovery", {"document": "report", "page": 1, "query": "net income"})
    [match] = obs.content["matches"]
    left, top, right, bottom = match["box"]
    assert match["text"] == "Net income"
    assert left == pytest.approx(66 / WIDTH, abs=0.01) and top < 170 / HEIGHT < bottom  # row 3 of the table


def test_spatial_colors_find_the_red_value_and_the_highlighted_header(toolkit):
    obs = toolkit.call("spatial_recovery", {"document": "report", "page": 1, "mode": "colors", "region": table_region()})
    colors = {w["text"]: (w["color_name"], w["background_name"]) for w in obs.content["words"]}
    assert colors["5,310"][0] == "red" and colors["4,870"][0] == "black" and colors["48,250"][0] == "black"
    assert colors["2023"][1] == "light blue" and colors["Revenue"][1] == "white" and colors["11.0%"][1] == "yellow"
    assert obs.content["dominant"]["text_colors"] == {"black": 13, "red": 1}


def test_spatial_colors_on_a_scan_come_from_pixels(toolkit):
    obs = toolkit.call("spatial_recovery", {"document": "scan", "page": 1, "mode": "colors", "region": table_region(),
                                            "query": "5,310"})
    [word] = obs.content["words"]
    assert word["color_name"] == "red" and obs.content["source"].startswith("ocr:")


def test_spatial_line_reads_text_along_a_diagonal_in_order(toolkit):
    line = [0.15, 0.55, 0.75, 0.85]
    obs = toolkit.call("spatial_recovery", {"document": "report", "page": 2, "mode": "line", "line": line})
    assert obs.content["text"] == " ".join(DIAGONAL)  # distractors off the line are left out
    offsets = [w["offset"] for w in obs.content["words"]]
    assert offsets == sorted(offsets) and 0 <= offsets[0] and offsets[-1] <= 1
    backwards = toolkit.call("spatial_recovery", {"document": "report", "page": 2, "mode": "line",
                                                  "line": [line[2], line[3], line[0], line[1]]})
    assert backwards.content["text"] == " ".join(reversed(DIAGONAL))
    missed = toolkit.call("spatial_recovery", {"document": "report", "page": 2, "mode": "line",
                                               "line": [0.15, 0.2, 0.75, 0.35]})
    assert missed.ok and missed.content["text"] == ""


# -- structure recovery ---------------------------------------------------------------------------
def test_structure_recovers_the_text_layer_table_with_colours(toolkit):
    obs = toolkit.call("structure_recovery", {"document": "report", "page": 1, "kind": "tables"})
    [table] = obs.content["tables"]
    assert obs.content["source"] == "pdf" and table["method"].startswith("pymupdf")
    assert _grid(table) == [[text for text, _, _ in row] for row in TABLE]
    assert _cell(table, "5,310")["color_name"] == "red" and _cell(table, "4,870")["color_name"] == "black"
    assert {_cell(table, t)["fill_name"] for t in ("Item", "2023", "2022")} == {"light blue"}
    assert _cell(table, "11.0%")["fill_name"] == "yellow" and _cell(table, "Revenue")["fill"] is None


def test_structure_recovers_the_same_table_from_the_scan(toolkit):
    obs = toolkit.call("structure_recovery", {"document": "scan", "page": 1, "region": table_region(), "kind": "tables"})
    [table] = obs.content["tables"]
    assert table["method"] == "ocr-clusters" and obs.content["source"].startswith("ocr:")
    assert _grid(table) == [[text for text, _, _ in row] for row in TABLE]
    assert _cell(table, "5,310")["color_name"] == "red" and _cell(table, "Revenue")["color_name"] == "black"
    assert _cell(table, "2022")["fill_name"] == "light blue" and _cell(table, "11.0%")["fill_name"] == "yellow"
    assert _cell(table, "10.4%")["fill"] is None


def test_structure_recovers_form_pairs(toolkit):
    obs = toolkit.call("structure_recovery", {"document": "report", "page": 3, "kind": "forms"})
    pairs = {f["label"]: f["value"] for f in obs.content["fields"]}
    assert pairs == {"Full name": "Amelia R. Okafor", "Member ID": "GL-20417", "Monthly fee": "$12.50",
                     "Date": "2 February 2024"}
    assert "tables" not in obs.content


# -- targeted lookup ------------------------------------------------------------------------------
def test_targeted_lookup_asks_the_reader_with_the_region_crop_and_text(corpus):
    from tools.perception import PerceptionToolkit

    seen = {}

    def reader(question, image, context):
        seen.update(question=question, size=image.size, context=context)
        return " $5,310 (printed in red) "

    kit = PerceptionToolkit(corpus, reader=reader)
    obs = kit.call("targeted_lookup", {"document": "report", "page": 1, "region": RED_VALUE,
                                       "question": "What is net income in 2023?"})
    assert obs.ok and obs.content == {"question": "What is net income in 2023?", "answer": "$5,310 (printed in red)",
                                      "text_source": "pdf"}
    assert seen["question"] == "What is net income in 2023?" and max(seen["size"]) == 1024
    assert seen["context"] == "5,310"

    def broken(question, image, context):
        raise RuntimeError("CUDA out of memory")

    failed = PerceptionToolkit(corpus, reader=broken).call(
        "targeted_lookup", {"document": "report", "page": 1, "question": "total?"})
    assert not failed.ok and "the reader failed" in failed.error and "CUDA out of memory" in failed.error


def test_prepare_lookup_gives_the_readers_evidence_without_a_reader(toolkit):
    """Agents whose model runs in the engine loop run the reader as their own turn."""
    from tools.perception import Observation
    from tools.perception.lookup import LookupRequest

    request = toolkit.prepare_lookup({"document": "report", "page": 1, "region": RED_VALUE, "question": " Net income? "})
    assert isinstance(request, LookupRequest)
    assert request.text == "5,310" and request.question == "Net income?" and max(request.image.size) == 1024
    obs = request.observation(" $5,310 ")
    assert obs.ok and obs.tool == "targeted_lookup" and obs.region == list(RED_VALUE)
    assert obs.content == {"question": "Net income?", "answer": "$5,310", "text_source": "pdf"}
    bad = toolkit.prepare_lookup({"document": "report", "page": 99, "question": "x"})
    assert isinstance(bad, Observation) and not bad.ok and "page 99" in bad.error
