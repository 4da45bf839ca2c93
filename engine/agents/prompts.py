"""Prompts of the document agents, in our own words after MADQA's BM25 agent (its Prompt 5).

MADQA's guidance, kept: the answer is in the documents; when a search finds nothing,
try other words (synonyms, abbreviations, a rephrasing); answer with as few words as
possible, the document's own words, no sentences; cite each source page once.
"""

from __future__ import annotations

__all__ = ["SEARCH_AGENT_SYSTEM", "READER_SYSTEM", "CLOSED_BOOK_SYSTEM", "format_hits", "format_question",
           "format_hit_images", "turn_footer", "NO_HITS", "MALFORMED", "STOP_RULE", "for_images", "repeated_search",
           "retry_hint"]

# No example values: the tiny default model copies any example answer verbatim, and the
# structured-output schema already fixes the JSON shape, so the tools are described in words.
SEARCH_AGENT_SYSTEM = """\
You answer questions about a collection of PDF documents. The answer is in the documents: \
find it with the search tool, read the pages it returns, then answer.

You have two tools. Call one per turn, as a JSON object with a "tool" field.
- search: its "query" is a few keywords to look for. It returns the {k} best pages, each shown \
as "File: <document id>, Page: <number>" followed by the page text. Keywords are combined with \
AND; you may use OR, NOT, "exact phrases" and wildcards such as revenu*.
- answer: its "answer" is a list with your answer, and its "citations" list the document id and \
page number of each page you used. It ends the task.

How to work:
- First search with a few distinctive keywords from the question, not the whole question.
- If a search finds nothing useful, search again with other words: synonyms, abbreviations, \
a rephrasing, fewer words.
- Answer only from pages you have read. Use as few words as possible, copied from the page \
(a number with its unit or scale, a name, a date). No full sentences. For a list, give one \
item per element.
- Cite the page of every piece of evidence you used, each page once."""

READER_SYSTEM = """\
You answer a question about PDF documents from the pages you are shown, each introduced by \
"File: <document id>, Page: <number>". The answer is in them.
Call the answer tool, as a JSON object: its "answer" is a list with your answer, and its \
"citations" list the document id and page number of each page you used.
Use as few words as possible, copied from the pages; no full sentences. For a list, give one \
item per element. Cite each page you used once."""

CLOSED_BOOK_SYSTEM = """\
You answer a question about a company or organisation document without seeing the document.
Call the answer tool, as a JSON object: its "answer" is a list with your answer, and its \
"citations" list is empty. Use as few words as possible; no full sentences. Give your best guess."""

STOP_RULE = "More searching is unlikely to find better pages: answer now with the answer tool, from the pages you have read."

NO_HITS = "No pages match this query. Try fewer words, synonyms, OR between alternatives, or a wildcard."

MALFORMED = ("Your reply was not a valid tool call ({reason}). Reply with one JSON object: "
             '{{"tool": "search", "query": "..."}} or {{"tool": "answer", "answer": ["..."], "citations": [...]}}.')


def repeated_search(query: str, step: int, pages: list[tuple[str, int]], error: str | None) -> str:
    """The guided loop's answer to a query already searched: what it returned then, instead of the same pages again."""
    if error is not None:
        found = f"it failed: {error}"
    elif pages:
        found = "it returned " + "; ".join(f"File: {doc}, Page: {page}" for doc, page in pages) + " (shown above)"
    else:
        found = "it found no page"
    return (f'You already searched for "{query}" (turn {step}); {found}. Searching the same words again finds the '
            "same. Search with different words, or answer from the pages you have read.")


def retry_hint(parts: list[tuple[str, int]], suggestion: str | None, suggestion_pages: int) -> str:
    """The guided loop's observation for a search that found nothing: which words failed, and a query that works."""
    def pages(n: int) -> str:
        return "no page" if n == 0 else "1 page" if n == 1 else f"{n} pages"

    counts = ", ".join(f"{part} ({pages(n)})" for part, n in parts)
    head = (f"No page holds all of these together: {counts}." if len(parts) > 1
            else f"No page matches {counts}.")
    if suggestion is not None:
        return f'{head} Fewer words find pages: for example "{suggestion}" matches {pages(suggestion_pages)}.'
    return (f"{head} Use other words: a synonym, an abbreviation, another form of the word, or a wildcard "
            "such as revenu*.")


def format_question(question: str) -> str:
    return f"Question: {question.strip()}"


def format_hits(query: str | None, hits: list[tuple[str, int, str]]) -> str:
    """Observation for text-only models: each hit labelled `File: X, Page: N` (as MADQA's agent) with its text."""
    head = f"Search results for: {query}\n\n" if query is not None else "Pages:\n\n"
    blocks = [f"[{i}] File: {doc}, Page: {page}\n{text.strip()}" for i, (doc, page, text) in enumerate(hits, start=1)]
    return head + "\n\n".join(blocks)


def format_hit_images(query: str | None, hits: list[tuple[str, int, object]]) -> list:
    """Observation for vision models: each hit labelled `File: X, Page: N` followed by its page image.

    Returns message content parts (strings and PIL images) for `session.append_message`.
    """
    parts: list = [f"Search results for: {query}\n" if query is not None else "Pages:\n"]
    for i, (doc, page, image) in enumerate(hits, start=1):
        parts += [f"[{i}] File: {doc}, Page: {page}\n", image, "\n"]
    return parts


def for_images(system: str) -> str:
    """A built-in system prompt with pages described as images instead of text."""
    return system.replace("followed by the page text", "followed by an image of the page")


def turn_footer(turns_left: int) -> str:
    """Reminder appended to each observation; on the last turn, the instruction to answer."""
    if turns_left <= 1:
        return "\n\nThis is your last turn: answer now with the answer tool."
    return f"\n\n({turns_left} turns left.)"
