"""Images and scanned PDFs with known text, made in the tests."""

from __future__ import annotations

from pathlib import Path

from PIL import Image


def text_image(lines: list[tuple[float, float, str]], width: float = 400, height: float = 160, dpi: int = 150,
               fontsize: float = 14) -> tuple[Image.Image, list[tuple[str, tuple[float, float, float, float]]]]:
    """Render text at (x, y) points to an RGB image; also return the words with their boxes in pixels."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    for x, y, text in lines:
        page.insert_text((x, y), text, fontsize=fontsize, fontname="helv")
    zoom = dpi / 72
    pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
    words = [(w[4], tuple(v * zoom for v in w[:4])) for w in page.get_text("words")]
    doc.close()
    return Image.frombytes("RGB", (pix.width, pix.height), pix.samples), words


def scanned_pdf(path: str | Path, pages: list[list[tuple[float, float, str]]], width: float = 400,
                height: float = 200, dpi: int = 150, fontsize: float = 16) -> Path:
    """A PDF whose pages are images of text (no text layer), one image per page."""
    import io

    import pymupdf

    doc = pymupdf.open()
    for lines in pages:
        image, _ = text_image(lines, width, height, dpi, fontsize)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        page = doc.new_page(width=width, height=height)
        page.insert_image(page.rect, stream=buffer.getvalue())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path)
    doc.close()
    return path
