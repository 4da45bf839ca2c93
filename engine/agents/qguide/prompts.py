"""Q-Guide's prompts, in our own words after the paper (Section 3.2: "intentionally minimal — short
operator descriptions and answer-format guidance, with no explicit planning, category routing, or
advisory hints").

The policy is never told how many rounds it has left: then the run with budget T_max = k is
exactly the first k − 1 rounds of the run with budget k + 1 followed by the forced submission,
which is what lets `--max-rounds-sweep` branch one run instead of repeating it per budget.
"""

from __future__ import annotations

__all__ = ["system_prompt", "TOOL_LINES", "FORCED", "MALFORMED", "verify_prompt", "arbitration_prompt",
           "LOOKUP_SYSTEM", "lookup_prompt", "pages_intro", "document_intro"]

TOOL_LINES = {
    "text_recovery": "text_recovery(document, page, region): the text of a page or region, in reading order; "
                     "for small print, labels, captions, form entries.",
    "visual_detail": "visual_detail(document, page, region): a zoomed, sharp image of a region; for colour, "
                     "shape, layout, chart marks.",
    "spatial_recovery": "spatial_recovery(document, page, region, mode): mode words: each word with its box "
                        "(query: only where a phrase occurs); mode colors: each word's text and background "
                        "colour (which value is red, which row is highlighted); mode line with line [x0, y0, x1, "
                        "y1]: the words along that line, in order.",
    "structure_recovery": "structure_recovery(document, page, region, kind): tables as rows of cells with their "
                          "colours, form fields as label: value, and the layout (kind layout): headings by level, "
                          "sections, text blocks in reading order.",
    "targeted_lookup": "targeted_lookup(document, page, region, question): ask a precise question about one "
                       "region you have located; returns a short answer with a confidence.",
    "search": "search(query): BM25 over every page of the collection; returns the best pages as "
              "\"File: <document>, Page: <n>\" with their text. Keywords are AND-ed; OR and \"phrases\" work.",
}

_SYSTEM = """\
You answer a question about documents. {context}
Seeing a page is not reading it: small text, tables, colours and rotated labels are easy to \
misread, so recover the exact evidence the question needs before answering.

Each turn, reply with one JSON object:
- {{"tool": "perceive", "calls": [...]}}: call one or more tools at once; each call is \
{{"name": <tool>, "arguments": {{...}}}}. A region is [left, top, right, bottom] as fractions \
of the page (0 to 1); leave it out for the whole page. Results come back as observations [o1], [o2], ...
- {{"tool": "submit", "answer": [...], "citations": [...], "reasoning": "...", "confidence": "low" | "med" | "high"}}: \
your final answer, the pages it comes from, one short sentence of reasoning, and how sure the \
evidence makes you. Use "high" only when an observation states the answer.

Tools:
{tools}

Answer with as few words as possible, copied from the document (a number with its unit, a \
name, a date); no sentences. If the document does not contain the answer, answer "Unknown"."""


def system_prompt(tools: list[str], collection: bool) -> str:
    context = ("The answer is somewhere in a collection of PDF documents: find the pages with search, "
               "then read them." if collection else
               "The pages you are given come from one document, each labelled \"File: <document>, Page: <n>\".")
    return _SYSTEM.format(context=context, tools="\n".join(f"- {TOOL_LINES[name]}" for name in tools))


FORCED = "Submit your answer now, with its citations, a short reasoning and your confidence."

MALFORMED = ("Your reply was not a valid turn ({reason}). Reply with one JSON object: "
             '{{"tool": "perceive", "calls": [...]}} or {{"tool": "submit", "answer": [...], "citations": [...], '
             '"reasoning": "...", "confidence": "med"}}.')


def document_intro(document: str, first: int, last: int, total: int) -> str:
    span = f"page {first}" if first == last else f"pages {first} to {last}"
    return f"Document {document} ({total} pages); you are shown {span}."


def pages_intro() -> str:
    return "Pages:\n"


def pages_withheld(document: str, pages: list[int]) -> str:
    """A text model's first turn without the pages' text: their names, and where their text comes from."""
    names = "\n".join(f"File: {document}, Page: {page}" for page in pages)
    return (f"Pages (their text is not shown here; read what you need with the tools):\n{names}")


def verify_prompt(answer: list[str], confidence: str, gate: str, observations: int) -> str:
    return (f"Your answer {answer} was submitted with confidence {confidence}, below {gate}. Check it against "
            f"the observations [o1] to [o{observations}] only: is the answer stated in one of them? Reply "
            '{"supported": true or false, "observation": <the number of the observation that states it, 0 if none>}.')


def arbitration_prompt(question: str, candidates: list[tuple[list[str], str, str]]) -> str:
    """candidates: (answer, confidence, evidence text) per competing answer."""
    blocks = [f"Candidate {i}: {answer} (confidence {confidence})\nEvidence:\n{evidence or '(no observations)'}"
              for i, (answer, confidence, evidence) in enumerate(candidates, start=1)]
    return (f"Question: {question}\n\nParts of one document were read separately and gave different answers "
            "with equal weight:\n\n" + "\n\n".join(blocks) +
            '\n\nWhich candidate does the evidence support best? Reply {"choice": <number>}.')


LOOKUP_SYSTEM = ("You read one region of a document page and answer a question about it in as few words as "
                 'possible, copied from the region, and say how sure the region makes you. Reply '
                 '{"answer": "...", "confidence": "low" | "med" | "high"}; answer "Unknown" if the region '
                 "does not say.")


def lookup_prompt(question: str, document: str, page: int, text: str) -> str:
    return f"Region of {document}, page {page}. Its text:\n{text or '(no text)'}\n\nQuestion: {question}"
