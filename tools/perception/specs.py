"""The five perception tools' specs (name, description, JSON parameters), for agents and grammars.

Defined once here; `tools.schema.ToolRegistry(PERCEPTION_TOOLS)` exports them for a chat
template (`to_json()`) and for xgrammar-constrained calls (`call_schema()`). Descriptions
follow Q-Guide's (Section 3.3): what each tool recovers and when it helps.
"""

from __future__ import annotations

from tools.schema import ToolSpec

__all__ = ["MAX_TEXT_CHARS", "PERCEPTION_TOOLS", "TEXT_RECOVERY", "VISUAL_DETAIL", "SPATIAL_RECOVERY", "STRUCTURE_RECOVERY",
           "TARGETED_LOOKUP"]

# Free-text arguments (a lookup's question, a phrase to locate) are bounded so that one call has a
# bounded length: an unbounded question let a round run on until the turn's token budget cut it
# mid-JSON (unparseable). The bound does not make four calls fit the default 256-token turn: with
# SmolLM2's and Qwen2.5's tokenizers one targeted_lookup call with a region and a 160-character
# question is ~110 tokens, four ~400 (with 100 characters still ~350); see engine/agents/qguide.
MAX_TEXT_CHARS = 160

_DOCUMENT = {"type": "string", "minLength": 1, "description": "Document id (the PDF's file name without .pdf)."}
_PAGE = {"type": "integer", "minimum": 1, "description": "Page number, starting at 1."}
_REGION = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 4, "maxItems": 4,
           "description": "Area to read as [left, top, right, bottom], fractions of the page width and height "
                          "(0,0 is the top-left corner). Omit for the whole page."}
_SOURCE = {"type": "string", "enum": ["auto", "text_layer", "ocr"], "default": "auto",
           "description": "Where words come from: auto (the PDF's text layer where it is good, OCR otherwise), "
                          "text_layer, or ocr (read the pixels again)."}


def _params(extra: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": {"document": _DOCUMENT, "page": _PAGE, "region": _REGION, **extra},
            "required": ["document", "page", *required], "additionalProperties": False}


TEXT_RECOVERY = ToolSpec(
    "text_recovery",
    "Read the text of a page or region in reading order. Use it for small print, scattered labels, captions, "
    "form entries and dense paragraphs. Returns the text and whether it came from the PDF's text layer or OCR.",
    _params({"source": _SOURCE}),
)
VISUAL_DETAIL = ToolSpec(
    "visual_detail",
    "Zoom in: returns a high-resolution image of a region (padded and upscaled), without OCR. Use it for colour, "
    "shape, layout, chart marks, stamps, handwriting and anything text extraction loses.",
    _params({"size": {"type": "integer", "minimum": 64, "maximum": 2048, "default": 1024,
                      "description": "Longest side of the returned image in pixels."},
             "padding": {"type": "number", "minimum": 0, "maximum": 0.49, "default": 0.02,
                         "description": "Margin added around the region, as a fraction of the page."}}),
)
SPATIAL_RECOVERY = ToolSpec(
    "spatial_recovery",
    "Ground text in the page. mode=words: every word with its box, or with query only where that phrase occurs. "
    "mode=colors: each word's text and background colour (e.g. which value is red, which row is highlighted). "
    "mode=line: the words along the line from (x0, y0) to (x1, y1), in order (labels along a route, diagonal text).",
    _params({"mode": {"type": "string", "enum": ["words", "colors", "line"], "default": "words"},
             "query": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                       "description": "Phrase to locate (modes words, colors)."},
             "line": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 4,
                      "maxItems": 4, "description": "Mode line: [x0, y0, x1, y1], the end points as fractions of the page."},
             "corridor": {"type": "number", "minimum": 0.001, "maximum": 0.5, "default": 0.02,
                          "description": "Mode line: half-width of the band around the line, as a fraction of the page width."},
             "source": _SOURCE}),
)
STRUCTURE_RECOVERY = ToolSpec(
    "structure_recovery",
    "Recover tables as cells (row, column, text, text colour, fill colour), form fields as label-value pairs, "
    "and the layout: text blocks in reading order (heading, paragraph, caption), headings with their levels and "
    "the sections they open. Use it when the answer depends on a table's rows and columns, a highlighted cell, a "
    "form entry, or where something sits in the document's structure (which section, which heading).",
    _params({"kind": {"type": "string", "enum": ["all", "tables", "forms", "layout"], "default": "all"}}),
)
TARGETED_LOOKUP = ToolSpec(
    "targeted_lookup",
    "Ask a precise question about one region you have already located (a total, a width, a label, a table entry); "
    "the region's image and text are read by the model and a short answer is returned.",
    _params({"question": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                          "description": "The question about this region."}},
            required=("question",)),
)

PERCEPTION_TOOLS: tuple[ToolSpec, ...] = (TEXT_RECOVERY, VISUAL_DETAIL, SPATIAL_RECOVERY, STRUCTURE_RECOVERY,
                                          TARGETED_LOOKUP)
