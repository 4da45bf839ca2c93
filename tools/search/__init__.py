"""BM25 page search with MADQA's (Whoosh) query language."""

from tools.search.index import RETRIEVERS, BM25Params, SearchIndex, build_index
from tools.search.query import QuerySyntaxError, bag_of_words, parse_query
from tools.search.searcher import SearchHit, Searcher
from tools.search.tokenize import analyze, tokens

__all__ = [
    "BM25Params",
    "RETRIEVERS",
    "QuerySyntaxError",
    "SearchHit",
    "SearchIndex",
    "Searcher",
    "analyze",
    "bag_of_words",
    "build_index",
    "parse_query",
    "tokens",
]
