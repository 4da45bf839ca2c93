"""`dossier tools`: specs listed once, perception calls return grounded observations or error observations."""

import json

from typer.testing import CliRunner

from engine.cli.main import app
from tests.pdfs import make_pdf
from tools.corpus import IngestConfig, ingest

runner = CliRunner()


def test_tools_list_and_call(tmp_path):
    listed = json.loads(runner.invoke(app, ["tools", "list", "--format", "json"]).stdout)
    names = [spec["name"] for spec in listed]
    assert names[:2] == ["search", "answer"] and "structure_recovery" in names
    assert all(spec["parameters"]["type"] == "object" for spec in listed)

    make_pdf(tmp_path / "s" / "memo.pdf", ["Staff parking is in lot C.", "Second page"])
    ingest([tmp_path / "s"], tmp_path / "c", IngestConfig(workers=1))
    ok = runner.invoke(app, ["tools", "call", "--corpus", str(tmp_path / "c"), "text_recovery",
                             '{"document": "memo", "page": 1}', "--ocr", "none"])
    assert ok.exit_code == 0, ok.output
    observation = json.loads(ok.stdout)
    assert observation["tool"] == "text_recovery" and "lot C" in observation["content"]["text"]
    bad = runner.invoke(app, ["tools", "call", "--corpus", str(tmp_path / "c"), "text_recovery",
                              '{"document": "memo", "page": 7}', "--ocr", "none"])
    assert bad.exit_code == 1 and "page 7 does not exist in 'memo' (it has 2 pages)" in json.loads(bad.stdout)["error"]
