"""Synthetic PDFs made in the tests (no files from outside the test)."""

from __future__ import annotations

from pathlib import Path


def make_pdf(path: str | Path, pages: list[str], width: float = 595, height: float = 842) -> Path:
    """Write a PDF whose page i holds the text pages[i] (wrapped into a text box)."""
    import pymupdf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page(width=width, height=height)
        if text:
            page.insert_textbox(pymupdf.Rect(40, 40, width - 40, height - 40), text, fontsize=10, fontname="helv")
    doc.save(path)
    doc.close()
    return path


def make_encrypted_pdf(path: str | Path, text: str, password: str) -> Path:
    import pymupdf

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), text)
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=password, owner_pw=password + "-owner")
    doc.close()
    return Path(path)


def make_image_only_pdf(path: str | Path, text: str) -> Path:
    """A page whose text exists only as pixels (a 'scan'): no text layer."""
    import pymupdf

    source = pymupdf.open()
    page = source.new_page()
    page.insert_text((72, 100), text, fontsize=18)
    png = page.get_pixmap(dpi=100).tobytes("png")
    doc = pymupdf.open()
    scan = doc.new_page()
    scan.insert_image(scan.rect, stream=png)
    doc.save(path)
    doc.close()
    return Path(path)


def make_text_store(root: str | Path, documents: dict[str, list[str]]):
    """A corpus store filled directly with page texts (no PDFs): fast fixtures for search tests."""
    import hashlib

    import numpy as np

    from tools.corpus.pdf import DocumentRecord, PageRecord
    from tools.corpus.store import CorpusStore

    store = CorpusStore(root, create=True)
    for doc_id, texts in documents.items():
        digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
        record = DocumentRecord(digest, len(texts), {})
        for number, text in enumerate(texts, start=1):
            words = text.split()
            boxes = np.zeros((len(words), 4), np.float32)
            record.pages.append(PageRecord(number, 595.0, 842.0, text, words, boxes, np.zeros((len(words), 3), np.int32), None))
        store.add_document(doc_id, f"/virtual/{doc_id}.pdf", 0, record)
    return store
