"""Brute-force reference matcher: which pages match a query, by regular expressions over page text.

Each page's text is analysed into its token string " t0 t1 t2 … " (the same analyzer as
the index), and every query node becomes a regex over that string. No index, no
positions: the property tests hold the positional index to exactly these results.
"""

from __future__ import annotations

import re

from tools.search.query import And, Empty, Node, Not, Or, Phrase, Term, Wildcard
from tools.search.tokenize import tokens

__all__ = ["token_string", "matches"]


def token_string(text: str) -> str:
    """A page's analysed tokens joined by single spaces, with a space at both ends."""
    return " " + " ".join(tokens(text)) + " "


def _element(node: Term | Wildcard) -> str:
    if isinstance(node, Term):
        return re.escape(node.token)
    return "".join("[^ ]*" if c == "*" else "[^ ]" if c == "?" else re.escape(c) for c in node.pattern)


def _regex(node: Term | Wildcard | Phrase) -> re.Pattern:
    if isinstance(node, Phrase):
        gap = f"(?: [^ ]+){{0,{node.slop}}} "
        body = gap.join(_element(e) for e in node.elements)
    else:
        body = _element(node)
    return re.compile(f" {body}(?= )")


def matches(node: Node, page_tokens: str) -> bool:
    """Does a page (given as `token_string(text)`) match the query AST?"""
    if isinstance(node, Empty):
        return True
    if isinstance(node, (Term, Wildcard, Phrase)):
        return _regex(node).search(page_tokens) is not None
    if isinstance(node, And):
        return all(matches(child, page_tokens) for child in node.children)
    if isinstance(node, Or):
        return any(matches(child, page_tokens) for child in node.children)
    if isinstance(node, Not):
        return not matches(node.child, page_tokens)
    raise AssertionError(f"unknown query node {node!r}")
