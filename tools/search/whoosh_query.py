"""Whoosh's default `QueryParser` (MADQA's harness), rebuilt onto our query AST.

The syntax is the one `tools/search/query.py` reads, but Whoosh groups it differently, and
the whoosh-compatible retriever must match what Whoosh would have searched:
- Explicit operators bind their neighbours before juxtaposition does: NOT first, then AND,
  then OR, each taking the node on either side. So `a b OR c` is a AND (b OR c), and
  `NOT a OR b` is (NOT a) OR b. Words side by side are AND-ed last.
- A word that analyses into several tokens ("net-income") is an AND of them, not a phrase.
- `"a b"~N` lets consecutive words be at most N positions apart (N-1 words between; our
  Phrase.slop counts the words between, so it is N-1). A plain phrase is N = 1.
- Wildcard words are lower-cased, not tokenized (`10-k*` matches no Whoosh token).
- The parsed query is normalised as Whoosh normalises it: nested ANDs (ORs) merged into
  their parent, then repeated subqueries dropped, so `a a` scores `a` once.
- Whoosh never raises on syntax: an unclosed quote is text, unbalanced parentheses are
  closed at the end or ignored, an operator at an edge is dropped.
Not reproduced (documented limits): field prefixes `f:` (read as text, as Whoosh does for
unknown fields, except where it would split the word), `'single quotes'`, ranges `[a TO b]`,
boosts `^2`, `*:*`, ANDNOT / ANDMAYBE / REQUIRE (read as words), and a lone `*` (ignored).
"""

from __future__ import annotations

import re

from tools.search.query import And, Empty, Node, Not, Or, Phrase, Term, Wildcard
from tools.search.whoosh_index import whoosh_tokens

__all__ = ["parse_whoosh_query", "whoosh_bag_of_words"]

_QMARKS = "?\u055e\u061f\u1367"  # WildcardPlugin.qmarks
# Taggers in the order Whoosh tries them at each position (plugin priority, then plugin order).
_TAGGERS = (
    ("wild", re.compile(f"[*{_QMARKS}]")),
    ("phrase", re.compile(r'"(?P<text>.*?)"(~(?P<slop>[1-9][0-9]*))?', re.S)),
    ("open", re.compile(r"[(]")),
    ("close", re.compile(r"[)]")),
    ("NOT", re.compile(r"(^|(?<=(\s|[()])))NOT(?=\s)")),
    ("AND", re.compile(r"(?<=\s)AND(?=\s)")),
    ("OR", re.compile(r"(?<=\s)OR(?=\s)")),
    ("ws", re.compile(r"\s+")),
)
_TEXT = ("word", "wild", "phrase")


class _Group(list):
    """A syntax group: kind "and" (juxtaposition, parentheses), "or", or "not" (one child)."""

    def __init__(self, kind: str, items=()):
        super().__init__(items)
        self.kind = kind


def _tag(text: str) -> list:
    nodes: list = []
    prev = pos = 0
    while pos < len(text):
        for kind, regex in _TAGGERS:
            match = regex.match(text, pos)
            if match and match.end() > pos:
                if prev < pos:
                    nodes.append(("word", text[prev:pos]))
                nodes.append((kind, match.group("text"), int(match.group("slop") or 1)) if kind == "phrase"
                             else (kind, match.group(0)))
                prev = pos = match.end()
                break
        else:
            pos += 1
    if prev < len(text):
        nodes.append(("word", text[prev:]))
    return nodes


def _groups(nodes: list) -> _Group:
    """GroupPlugin.do_groups: parentheses into nested AND groups."""
    stack = [_Group("and")]
    for node in nodes:
        if node[0] == "open":
            stack.append(_Group("and"))
        elif node[0] == "close":
            if len(stack) > 1:
                last = stack.pop()
                stack[-1].append(last)
        else:
            stack[-1].append(node)
    top = stack[0]
    for level in stack[1:]:
        top.extend(level)
    if len(top) == 1 and isinstance(top[0], _Group):
        top = top[0]
    return top


def _wildcards(group: _Group) -> _Group:
    """WildcardPlugin.do_wildcards: a wildcard joins the text right before and after it."""
    i = 0
    while i < len(group):
        node = group[i]
        if isinstance(node, _Group):
            _wildcards(node)
            i += 1
            continue
        if node[0] == "wild":
            if i < len(group) - 1 and not isinstance(group[i + 1], _Group) and group[i + 1][0] in _TEXT:
                node = group[i] = ("wild", node[1] + group.pop(i + 1)[1])
            if i > 0 and not isinstance(group[i - 1], _Group) and group[i - 1][0] in _TEXT:
                previous = group.pop(i - 1)
                i -= 1
                group[i] = ("wild", previous[1] + node[1])
                continue
        i += 1
    for i, node in enumerate(group):
        if not isinstance(node, _Group) and node[0] == "wild":
            text = node[1]
            if len(text) > 1 and not any(q in text for q in _QMARKS) and text.find("*") == len(text) - 1:
                group[i] = ("prefix", text[:-1])
    return group


def _strip_ws(group: _Group) -> _Group:
    out = _Group(group.kind)
    for node in group:
        if isinstance(node, _Group):
            out.append(_strip_ws(node))
        elif node[0] != "ws":
            out.append(node)
    return out


def _operators(group: _Group) -> _Group:
    """OperatorsPlugin.do_operators: NOT, then AND, then OR, each left to right, then the subgroups."""
    for op in ("NOT", "AND", "OR"):
        i = 0
        while i < len(group):
            node = group[i]
            if isinstance(node, _Group) or node[0] != op:
                i += 1
                continue
            if op == "NOT":  # prefix operator
                length = len(group)
                del group[i]
                if i < length - 1:
                    group[i] = _Group("not", [group[i]])
                continue
            kind = op.lower()
            if 0 < i < len(group) - 1:
                left, right = group[i - 1], group[i + 1]
                if isinstance(left, _Group) and left.kind == kind:
                    left.append(right)
                    del group[i:i + 2]
                else:
                    group[i - 1:i + 2] = [_Group(kind, [left, right])]
            else:
                del group[i]
    for i, node in enumerate(group):
        if isinstance(node, _Group):
            group[i] = _operators(node)
    return group


def _query(node) -> Node | None:
    """Syntax node → query (None where Whoosh's node yields no query)."""
    if isinstance(node, _Group):
        subs = [q for q in (_query(child) for child in node) if q is not None]
        if node.kind == "not":
            return Not(subs[0]) if subs and not (isinstance(subs[0], (And, Or)) and not subs[0].children) else None
        return (And if node.kind == "and" else Or)(tuple(subs))
    kind, text = node[0], node[1]
    if kind == "word":
        tokens = whoosh_tokens(text)
        if not tokens:
            return None
        return Term(tokens[0]) if len(tokens) == 1 else And(tuple(Term(t) for t in tokens))
    if kind == "phrase":
        return Phrase(tuple(Term(t) for t in whoosh_tokens(text)), node[2] - 1)
    if kind == "prefix":
        return Wildcard(text.lower() + "*")
    if kind == "wild":
        return Wildcard(text.lower())
    return None  # a stray operator (NOT NOT a)


def _normalize(node: Node) -> Node:
    """Whoosh's Query.normalize(): merge nested same-kind groups, drop repeats and nulls."""
    if isinstance(node, (And, Or)):
        kind = type(node)
        subs: list[Node] = []
        for child in node.children:
            if type(child) is kind:
                subs.extend(_normalize(grandchild) for grandchild in child.children)
            else:
                subs.append(_normalize(child))
        kept = [q for q in dict.fromkeys(subs) if not isinstance(q, Empty)]
        if not kept:
            return Empty()
        return kept[0] if len(kept) == 1 else kind(tuple(kept))
    if isinstance(node, Not):
        child = _normalize(node.child)
        return child if isinstance(child, Empty) else Not(child)
    if isinstance(node, Phrase):
        if not node.elements:
            return Empty()
        return node.elements[0] if len(node.elements) == 1 else node
    if isinstance(node, Wildcard):
        if node.pattern == "*":
            return Empty()  # Whoosh: Every (all pages); not reproduced
        if "*" not in node.pattern and "?" not in node.pattern:
            return Term(node.pattern)
    return node


def parse_whoosh_query(query: str) -> Node:
    """Parse a query as Whoosh's `QueryParser(field, schema)` would, normalised.

    Never raises: Whoosh reads any string.
    """
    group = _operators(_strip_ws(_wildcards(_groups(_tag(query)))))
    parsed = _query(group)
    return Empty() if parsed is None else _normalize(parsed)


def whoosh_bag_of_words(text: str) -> Node:
    """Free text as a Whoosh OR query of its analysed tokens (each once, in order)."""
    terms = tuple(dict.fromkeys(Term(t) for t in whoosh_tokens(text)))
    if not terms:
        return Empty()
    return terms[0] if len(terms) == 1 else Or(terms)
