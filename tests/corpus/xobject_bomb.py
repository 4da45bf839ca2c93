"""A hostile PDF made in the tests: Form XObjects that each draw the one below twice (issue 45, finding 6).

Level 0 shows one word; level k draws level k-1 twice; the page draws the top level once, so
reading or drawing the page costs 2^depth text runs. At depth 40 the file is under 8 KB and
MuPDF would work for days while its memory grows without bound.
"""

from __future__ import annotations

from pathlib import Path


def _stream(head: bytes, body: bytes) -> bytes:
    return head + b" /Length %d >>\nstream\n" % len(body) + body + b"\nendstream"


def make_xobject_bomb(path: str | Path, depth: int = 40, word: str = "bomb") -> Path:
    """Write a one-page PDF whose page draws 2^depth copies of `word` through nested Form XObjects."""
    form = b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources "
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        5: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        6: _stream(form + b"<< /Font << /F1 5 0 R >> >>", b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % word.encode()),
    }
    for level in range(1, depth + 1):  # object 6 + level draws object 6 + level - 1 twice
        objects[6 + level] = _stream(form + b"<< /XObject << /X %d 0 R >> >>" % (6 + level - 1), b"/X Do /X Do")
    objects[4] = _stream(b"<<", b"/X Do")
    objects[3] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                  b"/Resources << /XObject << /X %d 0 R >> >> >>" % (6 + depth))
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref, size = len(out), max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[number] for number in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


def store_bomb_document(store, doc_id: str = "bomb", depth: int = 40, text: str = "") -> Path:
    """Put a bomb into a corpus store as if an ingest with a long enough deadline had read it.

    Its one page holds `text` (flagged for OCR when empty), so the studio and the OCR step can be
    tested on a stored page that would hang whoever draws it.
    """
    import numpy as np

    from tools.corpus.pdf import DocumentRecord, PageRecord, sha256_file, text_layer_problem

    pdf = make_xobject_bomb(store.pdf_dir / f"{doc_id}.pdf", depth)
    words = text.split()
    page = PageRecord(1, 612.0, 792.0, text, words, np.zeros((len(words), 4), np.float32),
                      np.zeros((len(words), 3), np.int32), text_layer_problem(text))
    store.add_document(doc_id, str(pdf), pdf.stat().st_size, DocumentRecord(sha256_file(pdf), 1, {}, [page]))
    return pdf
