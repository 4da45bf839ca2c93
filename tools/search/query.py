"""The query language of MADQA's search tool (Whoosh syntax), parsed into a small AST.

    revenue 2019              both terms (AND is the default)
    revenue OR income         either
    revenue NOT forecast      revenue, without forecast (also: revenue AND NOT forecast)
    (revenue OR income) 2019  grouping
    "net income"              a phrase; "net income"~3 allows up to 3 words between
    rev*  colo?r              wildcards: * any run of characters, ? exactly one

Operators are the upper-case words AND, OR, NOT (lower-case ones are ordinary words).
Precedence: NOT binds tightest, then AND, then OR. Terms go through the same analyzer
as the pages (tools/search/tokenize.py): a term that analyses into several tokens
("10-K", "U.S.") becomes a phrase; a stopword-only term matches everything it is AND-ed
with, as in Whoosh. Errors (unclosed quote or parenthesis, an operator without an
operand) raise `QuerySyntaxError` with a caret under the offending position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.errors import DossierError
from tools.search.tokenize import analyze

__all__ = [
    "QuerySyntaxError",
    "Node",
    "Term",
    "Wildcard",
    "Phrase",
    "And",
    "Or",
    "Not",
    "Empty",
    "parse_query",
    "bag_of_words",
]


class QuerySyntaxError(DossierError):
    """A query that does not parse; the message shows the query with a caret at the error."""

    def __init__(self, query: str, position: int, message: str):
        self.query, self.position = query, position
        super().__init__(f"query syntax error: {message} at position {position + 1}\n  {query}\n  {' ' * position}^")


# ---- AST -----------------------------------------------------------------------------------
class Node:
    """Base class of query nodes."""


@dataclass(slots=True, frozen=True)
class Term(Node):
    token: str  # normalised token


@dataclass(slots=True, frozen=True)
class Wildcard(Node):
    pattern: str  # lower-cased pattern with * and ?

    def regex(self) -> re.Pattern:
        parts = ("[^ ]*" if c == "*" else "[^ ]" if c == "?" else re.escape(c) for c in self.pattern)
        return re.compile("".join(parts))

    @property
    def prefix(self) -> str:
        """The literal characters before the first wildcard (narrows the vocabulary scan)."""
        return re.split(r"[*?]", self.pattern, maxsplit=1)[0]


@dataclass(slots=True, frozen=True)
class Phrase(Node):
    elements: tuple[Term | Wildcard, ...]  # consecutive words
    slop: int = 0  # at most this many other words between consecutive elements (in order)


@dataclass(slots=True, frozen=True)
class And(Node):
    children: tuple[Node, ...]


@dataclass(slots=True, frozen=True)
class Or(Node):
    children: tuple[Node, ...]


@dataclass(slots=True, frozen=True)
class Not(Node):
    child: Node


@dataclass(slots=True, frozen=True)
class Empty(Node):
    """A term that analysed to nothing (stopwords, punctuation): neutral in AND and OR."""


# ---- lexer -----------------------------------------------------------------------------------
_LEX_RE = re.compile(r'\s+|(?P<lp>\()|(?P<rp>\))|(?P<quote>")|(?P<word>[^\s()"]+)')
_OPERATORS = {"AND", "OR", "NOT"}
_SLOP_RE = re.compile(r"~(\d+)")


@dataclass(slots=True)
class _Tok:
    kind: str  # "(", ")", "op", "word", "phrase"
    value: str
    pos: int
    slop: int = 0


def _lex(query: str) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    while i < len(query):
        match = _LEX_RE.match(query, i)
        assert match is not None  # the pattern matches any character
        if match.group("quote"):
            end = query.find('"', i + 1)
            if end < 0:
                raise QuerySyntaxError(query, i, "unclosed quote")
            slop = _SLOP_RE.match(query, end + 1)
            out.append(_Tok("phrase", query[i + 1:end], i, int(slop.group(1)) if slop else 0))
            i = slop.end() if slop else end + 1
            continue
        if match.group("lp"):
            out.append(_Tok("(", "(", i))
        elif match.group("rp"):
            out.append(_Tok(")", ")", i))
        elif match.group("word"):
            word = match.group("word")
            out.append(_Tok("op" if word in _OPERATORS else "word", word, i))
        i = match.end()
    return out


# ---- term analysis --------------------------------------------------------------------------
_WILDCARD_SPLIT = re.compile(r"[^\w*?]+")


def _analyze_word(word: str) -> Node:
    """A bare word: a term, a wildcard, or a phrase when it analyses into several tokens."""
    if "*" in word or "?" in word:
        parts = [p for p in _WILDCARD_SPLIT.split(word.casefold()) if p]
        elements: list[Term | Wildcard] = []
        for part in parts:
            if "*" in part or "?" in part:
                if not re.search(r"\w", part):
                    continue  # a bare "*" adds no constraint
                elements.append(Wildcard(part))
            else:
                elements.extend(Term(t.text) for t in analyze(part))
        return _phrase_or_single(elements, 0)
    return _phrase_or_single([Term(t.text) for t in analyze(word)], 0)


def _phrase_or_single(elements: list[Term | Wildcard], slop: int) -> Node:
    if not elements:
        return Empty()
    if len(elements) == 1:
        return elements[0]
    return Phrase(tuple(elements), slop)


# ---- parser ----------------------------------------------------------------------------------
class _Parser:
    def __init__(self, query: str):
        self.query = query
        self.toks = _lex(query)
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, message: str, tok: _Tok | None = None) -> QuerySyntaxError:
        pos = tok.pos if tok is not None else len(self.query)
        return QuerySyntaxError(self.query, pos, message)

    def parse(self) -> Node:
        if not self.toks:
            return Empty()
        node = self.or_expr()
        tok = self.peek()
        if tok is not None:
            raise self.error("unmatched closing parenthesis" if tok.kind == ")" else f"unexpected {tok.value!r}", tok)
        return node

    def or_expr(self) -> Node:
        children = [self.and_expr()]
        while (tok := self.peek()) is not None and tok.kind == "op" and tok.value == "OR":
            self.take()
            children.append(self.and_expr())
        return _combine(Or, children)

    def and_expr(self) -> Node:
        children = [self.not_expr()]
        while (tok := self.peek()) is not None and not (tok.kind == ")" or (tok.kind == "op" and tok.value == "OR")):
            if tok.kind == "op" and tok.value == "AND":
                self.take()
            children.append(self.not_expr())
        return _combine(And, children)

    def not_expr(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind == "op" and tok.value == "NOT":
            self.take()
            child = self.not_expr()
            return Empty() if isinstance(child, Empty) else Not(child)
        return self.atom()

    def atom(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise self.error("expected a word, phrase or '(' after the operator")
        if tok.kind == "op":
            raise self.error(f"operator {tok.value} needs a word or phrase before and after it", tok)
        if tok.kind == ")":
            raise self.error("unmatched closing parenthesis" if self.i == 0 or self.toks[self.i - 1].kind != "(" else "empty parentheses", tok)
        self.take()
        if tok.kind == "(":
            node = self.or_expr()
            close = self.peek()
            if close is None or close.kind != ")":
                raise self.error("unclosed parenthesis", tok)
            self.take()
            return node
        if tok.kind == "phrase":
            return _phrase_or_single([Term(t.text) for t in analyze(tok.value)], tok.slop)
        return _analyze_word(tok.value)


def _combine(kind, children: list[Node]) -> Node:
    kept = [c for c in children if not isinstance(c, Empty)]
    if not kept:
        return Empty()
    return kept[0] if len(kept) == 1 else kind(tuple(kept))


def parse_query(query: str) -> Node:
    """Parse a Whoosh-style query into an AST.

    Raises:
        QuerySyntaxError: unclosed quote or parenthesis, or an operator without operands.
    """
    return _Parser(query).parse()


def bag_of_words(text: str) -> Node:
    """Free text as a query: every token OR-ed (plain BM25 ranking, operators not interpreted)."""
    terms = list(dict.fromkeys(Term(t.text) for t in analyze(text)))
    return _combine(Or, terms)
