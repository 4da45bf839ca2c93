"""Reading PDFs: text layer, words with boxes, and a one-line reason for every unreadable file."""

import os

import pytest

from tests.pdfs import make_encrypted_pdf, make_image_only_pdf, make_pdf
from tools.corpus.pdf import PdfError, read_pdf, text_layer_problem


def test_text_layer_problem_flags_empty_and_garbage():
    assert text_layer_problem("") == "no text"
    assert text_layer_problem(" \n\t ") == "no text"
    assert text_layer_problem("\ufffd\ufffd\ufffd\ufffdab") == "undecodable glyphs"
    assert text_layer_problem("Revenue rose 5% in Q3") is None


def test_read_pdf_extracts_pages_words_and_boxes(tmp_path):
    path = make_pdf(tmp_path / "r.pdf", ["Revenue 2019 was $1,577 million", "Second page text"])
    record = read_pdf(path)
    assert record.page_count == 2 and [p.number for p in record.pages] == [1, 2]
    first = record.pages[0]
    assert "Revenue 2019" in first.text
    assert first.words[:2] == ["Revenue", "2019"]
    assert first.boxes.shape == (len(first.words), 4)
    x0, y0, x1, y1 = first.boxes[0]
    assert 0 <= x0 < x1 <= first.width and 0 <= y0 < y1 <= first.height
    assert first.ocr_reason is None
    assert len(record.sha256) == 64


def test_image_only_page_is_flagged_for_ocr(tmp_path):
    record = read_pdf(make_image_only_pdf(tmp_path / "scan.pdf", "SCANNED NOTICE"))
    assert record.pages[0].ocr_reason == "no text"


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty file"),
        (os.urandom(4096), "not a PDF"),
        (b"%PDF-1.4\n%%EOF\n", "damaged or truncated"),
    ],
)
def test_unreadable_files_get_a_one_line_reason(tmp_path, content, reason):
    path = tmp_path / "bad.pdf"
    path.write_bytes(content)
    with pytest.raises(PdfError) as err:
        read_pdf(path)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_truncated_pdf_is_an_error_or_readable_never_a_crash(tmp_path):
    good = make_pdf(tmp_path / "g.pdf", ["some text here"] * 3)
    truncated = tmp_path / "t.pdf"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 3])
    try:
        record = read_pdf(truncated)  # MuPDF may repair a truncated file
        assert record.page_count >= 0
    except PdfError as err:
        assert str(err)


def test_encrypted_pdf_needs_the_password(tmp_path):
    path = make_encrypted_pdf(tmp_path / "secret.pdf", "Top secret figures", "s3cret")
    with pytest.raises(PdfError, match="password-protected: re-run with --password"):
        read_pdf(path)
    with pytest.raises(PdfError, match="wrong"):
        read_pdf(path, password="nope")
    record = read_pdf(path, password="s3cret")
    assert "Top secret" in record.pages[0].text
    assert record.decrypted is not None  # stored decrypted so pages render later
