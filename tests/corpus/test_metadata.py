"""Document metadata: the file format, storage in the corpus, and filters selecting exactly the right documents."""

import json

import pytest
from typer.testing import CliRunner

from engine.cli.main import app
from tests.pdfs import make_pdf
from tools.corpus import CorpusStore, IngestConfig, ingest, metadata_schema, read_metadata_file, select_documents
from tools.corpus.metadata import matches
from tools.errors import DossierError

META = {
    "alder-2021": {"company": "Alder Robotics", "year": 2021, "report_type": "annual report", "sector": "robotics"},
    "alder-2022": {"company": "Alder Robotics", "year": 2022, "report_type": "annual report", "sector": "robotics"},
    "birch-2021": {"company": "Birch Foods", "year": 2021, "report_type": "annual report", "sector": "food"},
    "birch-2022": {"company": "Birch Foods", "year": 2022, "report_type": "annual report", "sector": "food"},
    "birch-2022-q": {"company": "Birch Foods", "year": 2022, "report_type": "quarterly report", "sector": "food"},
    "cedar-2022": {"company": "Cedar Energy", "year": "2022", "report_type": "Annual Report", "sector": "energy"},
}


@pytest.mark.parametrize(("restriction", "expected"), [
    ({}, sorted(META)),
    ({"year": [2021]}, ["alder-2021", "birch-2021"]),
    ({"year": 2022, "report_type": "annual report"}, ["alder-2022", "birch-2022", "cedar-2022"]),  # "2022" and case
    ({"year": ["2021", "2022"], "sector": ["food"]}, ["birch-2021", "birch-2022", "birch-2022-q"]),
    ({"company": "Alder Robotics", "year": [2023]}, []),
    ({"auditor": "KPMG"}, []),  # a field no document has selects nothing
])
def test_filters_select_exactly_the_right_documents(restriction, expected):
    assert select_documents(META, restriction) == expected


def test_matching_rules():
    assert matches({"year": 2021.0}, {"year": "2021"})  # a float year from a spreadsheet
    assert not matches({"year": 2021}, {"year": "202"})  # no prefix matching
    assert matches({"listed": True}, {"listed": ["true"]})
    assert not matches({}, {"year": 2021})


def test_schema_shows_types_counts_and_few_values():
    schema = metadata_schema(META)
    assert schema["company"] == {"type": "string", "documents": 6,
                                 "values": ["Alder Robotics", "Birch Foods", "Cedar Energy"]}
    assert schema["year"]["type"] == "mixed" and schema["year"]["documents"] == 6
    many = {f"d{i}": {"n": i} for i in range(30)}
    assert metadata_schema(many)["n"] == {"type": "integer", "documents": 30, "values": None}


def test_metadata_file_reports_bad_lines_and_keeps_the_rest(tmp_path):
    path = tmp_path / "metadata.jsonl"
    path.write_text("\n".join([
        json.dumps({"document": "a", "year": 2021}),
        "{not json",
        json.dumps({"company": "X"}),
        json.dumps({"file": "b.pdf", "year": 2022, "tags": ["x"]}),
        json.dumps({"id": "c.pdf", "year": 2022}),
        json.dumps({"document": "a", "year": 1999}),
        "",
        json.dumps({"document": "d"}),
    ]) + "\n")
    rows, problems = read_metadata_file(path)
    assert rows == {"a": {"year": 2021}, "c": {"year": 2022}}
    assert [(p["line"], p["reason"].split(" (")[0].split(":")[0]) for p in problems] == [
        (2, "not valid JSON"), (3, "no document id"), (4, "field 'tags' must be a string, number, boolean or null, got [\"x\"]"),
        (6, "document 'a' is listed twice; the first entry is kept"), (8, "no fields besides the document id")]
    with pytest.raises(DossierError, match="does not exist"):
        read_metadata_file(tmp_path / "missing.jsonl")


def test_stored_in_the_corpus_and_kept_when_a_document_is_reingested(tmp_path):
    make_pdf(tmp_path / "src" / "alder-2021.pdf", ["Alder Robotics annual report 2021"])
    make_pdf(tmp_path / "src" / "birch-2021.pdf", ["Birch Foods annual report 2021"])
    ingest([tmp_path / "src"], tmp_path / "c", IngestConfig(workers=1))
    store = CorpusStore(tmp_path / "c")
    assert store.document_metadata() == {}
    problems = store.set_metadata({"alder-2021": META["alder-2021"], "birch-2021": META["birch-2021"],
                                   "ghost": {"year": 1}}, "m.jsonl")
    assert [p["document"] for p in problems] == ["ghost"] and "not in the corpus" in problems[0]["reason"]
    make_pdf(tmp_path / "src" / "alder-2021.pdf", ["Alder Robotics annual report 2021, revised"])
    ingest([tmp_path / "src"], tmp_path / "c", IngestConfig(workers=1))  # re-ingested: new bytes
    assert CorpusStore(tmp_path / "c").document_metadata() == {"alder-2021": META["alder-2021"],
                                                               "birch-2021": META["birch-2021"]}


def test_cli_ingest_with_metadata(tmp_path):
    make_pdf(tmp_path / "src" / "alder-2021.pdf", ["Alder Robotics annual report 2021"])
    meta = tmp_path / "metadata.jsonl"
    meta.write_text(json.dumps({"document": "alder-2021", "company": "Alder Robotics", "year": 2021}) + "\n"
                    + json.dumps({"document": "nobody-2020", "year": 2020}) + "\n")
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "src"), "--corpus", str(tmp_path / "c"),
                                      "--metadata", str(meta), "--ocr", "none"])
    assert result.exit_code == 0, result.output
    assert "metadata: 1 documents (company, year), 1 skipped" in result.output
    assert "nobody-2020: document 'nobody-2020' is not in the corpus" in result.output
    listing = CliRunner().invoke(app, ["corpus", "list", "--corpus", str(tmp_path / "c"), "--format", "json"])
    assert json.loads(listing.output)[0]["fields"] == {"company": "Alder Robotics", "year": 2021}
    missing = CliRunner().invoke(app, ["ingest", str(tmp_path / "src"), "--corpus", str(tmp_path / "c"),
                                       "--metadata", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 1 and "does not exist" in str(missing.exception or missing.output)
