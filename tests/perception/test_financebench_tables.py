"""Structure recovery on real FinanceBench statement pages: cells agree with the text layer.

Three statements with different layouts: 3M's cash-flow statement (shaded rows, "$" in its own
column, years centred over "$ amount"), Amazon's income statement ("Year Ended December 31,"
spanning the year columns) and Boeing's statement of operations.
"""

import re

import pytest

pytestmark = pytest.mark.shared

PAGES = [  # document, page (1-indexed), row label, its values, the year header over them
    ("3M_2018_10K", 60, "Net income including noncontrolling interest", ["$5,363", "$4,869", "$5,058"],
     ["2018", "2017", "2016"]),
    ("AMAZON_2017_10K", 38, "Net product sales", ["$79,268", "$94,665", "$118,573"], ["2015", "2016", "2017"]),
    ("BOEING_2018_10K", 50, "Sales of products", ["$90,229", "$83,740", "$83,198"], ["2018", "2017", "2016"]),
]


@pytest.fixture(scope="module")
def statements(shared_dir, tmp_path_factory):
    from tools.corpus import IngestConfig, ingest
    from tools.perception import PerceptionToolkit

    pdfs = shared_dir / "data" / "financebench" / "pdfs"
    corpus = tmp_path_factory.mktemp("fb") / "corpus"
    summary = ingest([pdfs / f"{doc}.pdf" for doc, *_ in PAGES], corpus, IngestConfig(workers=1))
    assert summary.documents == 3
    return PerceptionToolkit(corpus, ocr=None)


def _rows(table):
    rows: dict[int, dict[int, dict]] = {}
    for cell in table["cells"]:
        rows.setdefault(cell["row"], {})[cell["column"]] = cell
    return rows


@pytest.mark.parametrize("document, page, label, values, years", PAGES, ids=[p[0] for p in PAGES])
def test_statement_rows_line_up_under_their_years(statements, document, page, label, values, years):
    obs = statements.call("structure_recovery", {"document": document, "page": page, "kind": "tables"})
    assert obs.ok, obs.error
    table = max(obs.content["tables"], key=lambda t: len(t["cells"]))
    rows = _rows(table)
    [row] = [r for r in rows.values() if r.get(0, {}).get("text") == label]
    assert [row[c]["text"] for c in sorted(row) if c > 0 and row[c]["text"]] == values
    value_columns = [c for c in sorted(row) if row[c]["text"] in values]
    [header] = [r for r in rows.values() if [r[c]["text"] for c in value_columns if c in r] == years]
    assert header  # each year sits in the column of its values


@pytest.mark.parametrize("document, page, label, values, years", PAGES, ids=[p[0] for p in PAGES])
def test_cells_agree_with_the_text_layer(statements, document, page, label, values, years):
    view = statements.context.view(document, page)
    obs = statements.call("structure_recovery", {"document": document, "page": page, "kind": "tables"})
    table = max(obs.content["tables"], key=lambda t: len(t["cells"]))
    left, top, right, bottom = (v * s for v, s in zip(table["box"], (view.width, view.height) * 2))
    words = [w for w in view.words() if left - 1 <= w.center[0] <= right + 1 and top - 1 <= w.center[1] <= bottom + 1]
    in_cells = "".join(c["text"] for c in table["cells"])
    covered = sum(1 for w in words if w.text in in_cells)
    assert covered >= 0.97 * len(words), (covered, len(words))
    checked = 0
    for row in _rows(table).values():
        filled = [row[c] for c in sorted(row) if row[c]["text"]]
        if len(filled) < 2:
            continue
        band = (min(c["box"][1] for c in filled) * view.height, max(c["box"][3] for c in filled) * view.height)
        line = sorted((w for w in words if band[0] <= w.center[1] <= band[1]), key=lambda w: w.box[0])
        from_cells = re.sub(r"\s+", "", "".join(c["text"] for c in filled))
        assert from_cells == "".join(w.text for w in line), (from_cells, [w.text for w in line])
        checked += 1
    assert checked >= 10  # a statement has many rows of label + amounts
