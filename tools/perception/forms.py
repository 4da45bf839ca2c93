"""Label–value pairs of forms: PDF form fields, and 'Label: value' text on the page.

Two sources, both in the region asked about:
- interactive form fields (AcroForm widgets) on text-layer pages: the field's label (or
  name) and its value, checkboxes as 'Yes'/'Off';
- printed pairs: on each visual row, a phrase ending with ':' followed by the next phrase
  ("Member ID:      GL-20417"), or one phrase with a colon after a short label
  ("Date: 9 September 2024"). Works the same on OCR words of scanned forms.
"""

from __future__ import annotations

import numpy as np

from tools.ocr.layout import rows_of
from tools.perception.page import PageView, Word
from tools.perception.cells import box_of, phrases_of

__all__ = ["form_fields", "printed_pairs"]

MAX_LABEL_WORDS = 6  # "Label: value" inside one phrase counts only when the label is this short


def form_fields(view: PageView, rect) -> list[dict]:
    """Interactive form fields whose box centre lies in the region (displayed-page points)."""
    import pymupdf

    out = []
    with pymupdf.open(view.pdf_path) as doc:
        page = doc.load_page(view.page - 1)
        rotation = page.rotation_matrix
        for widget in page.widgets() or []:
            box = widget.rect * rotation
            center = ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)
            if not (rect[0] <= center[0] <= rect[2] and rect[1] <= center[1] <= rect[3]):
                continue
            label = (widget.field_label or widget.field_name or "").strip()
            value = widget.field_value
            out.append({"label": label, "value": "" if value is None else str(value), "kind": widget.field_type_string,
                        "box": view.normalized((box.x0, box.y0, box.x1, box.y1)), "source": "form field"})
    return out


def printed_pairs(view: PageView, words: list[Word]) -> list[dict]:
    """'Label: value' pairs printed on the page, from words in reading order (text layer or OCR)."""
    if not words:
        return []
    boxes = np.array([w.box for w in words], np.float32)
    height = float(np.median(boxes[:, 3] - boxes[:, 1]))
    pairs = []
    for row in rows_of(boxes, np.arange(len(words))):
        phrases = phrases_of([words[i] for i in row], height)
        for index, phrase in enumerate(phrases):
            text = " ".join(w.text for w in phrase)
            if text.endswith(":") and index + 1 < len(phrases):
                value = phrases[index + 1]
                pairs.append(_pair(view, text[:-1], phrase, " ".join(w.text for w in value), value))
            elif ":" in text[:-1]:
                split = next(i for i, w in enumerate(phrase) if ":" in w.text)
                head, _, tail = phrase[split].text.partition(":")
                label_words = [w.text for w in phrase[:split]] + ([head] if head else [])
                value_words = ([tail] if tail else []) + [w.text for w in phrase[split + 1:]]
                if 0 < len(label_words) <= MAX_LABEL_WORDS and value_words and not head[-1:].isdigit():
                    value_boxes = phrase[split:] if tail else phrase[split + 1:]
                    pairs.append(_pair(view, " ".join(label_words), phrase[:split + 1], " ".join(value_words),
                                       value_boxes))
    return pairs


def _pair(view: PageView, label: str, label_words: list[Word], value: str, value_words: list[Word]) -> dict:
    return {"label": label.strip(), "value": value.strip(), "label_box": view.normalized(box_of(label_words)),
            "value_box": view.normalized(box_of(value_words)), "source": "printed"}

