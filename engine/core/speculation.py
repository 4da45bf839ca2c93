"""Draft tokens, checked by the model in one step: guesses from a sequence's own history (n-gram "prompt lookup"),
and the tokens a grammar forces.

An agent's turns repeat themselves: a tool call's JSON frame, a query retried word for word, a page's
text quoted back. When the last few tokens of a sequence occurred earlier in it, the tokens that followed
them then are a cheap guess of what comes next. `propose` finds the longest such match (the most recent one
among equals) and returns what followed, the way vLLM's `ngram` speculative method does (vLLM docs,
"Speculating by matching n-grams in the prompt").

The engine puts a greedy request's drafts in the same forward step as its last sampled token (one chunk of 1 +
k rows), in the budget the step's real tokens leave (`Scheduler._add_drafts`), takes the model's choice at
each row in order, and keeps each draft only while it equals the choice of the row before it
(`Engine._verify`): the tokens kept are the ones the model chose, one at a time, with the same grammar masks,
stop rules and length limit as without drafts. What changes is only how many rows a step computes. In the
batch-invariant mode (`EngineConfig.deterministic`) a row's logits do not depend on how its sequence was
chunked, so the reply is bit for bit the reply without drafts; in the default mode, as with batching, a near
tie between two tokens can go the other way.

A reply held to a grammar (a tool call, a JSON schema) drafts with it. A guess stops at the first token the grammar
would refuse (a fork of the reply's xgrammar matcher tries them: a few us). With no guess left, the drafts are the
tokens the grammar forces from there: xgrammar's jump-forward tokens (`GrammarMatcher.find_jump_forward_tokens`), the
forced text split greedily into the longest vocabulary tokens (the idea of SGLang's "jump-forward decoding", checked
here as drafts). MADQA's tool call is 29 Qwen2.5 tokens, of which 14 are forced (`<tool_call>\n{"name":`,
`_documents", "arguments": {"query":`, `</tool_call>`), and a prompt's last chunk drafts too, so a forced frame
costs no step of its own (a tool call's first delta is sent once its name is known). A model may split the forced
text otherwise: SmolLM2-135M writes `provide_answer` as `p`, `r`, `o`, ... under the grammar's mask, and
Qwen2.5-Coder-1.5B starts a call with `<` rather than the `<tool_call>` token, then writes the rest as drafted. Each
rejected draft is a row computed for nothing, so a reply whose model turns down the first forced token
`FORCED_MISSES` times in a row drafts no more forced tokens.

    from engine.core.speculation import propose
    propose([5, 6, 7, 8, 5, 6, 7], max_tokens=4)   # [8, 5, 6, 7]
"""

from __future__ import annotations

import numpy as np

__all__ = ["FORCED_MISSES", "FORCED_MOST", "MAX_MATCH", "MIN_MATCH", "SEARCH_WINDOW", "propose"]

MIN_MATCH = 3  # the shortest suffix worth trusting: a 1- or 2-token match is mostly a common word's chance repeat
MAX_MATCH = 8  # longer matches are not told apart further
SEARCH_WINDOW = 8192  # only the last tokens are searched: the cost per step stays flat on long sessions
FORCED_MOST = 32  # grammar-forced draft tokens per step at most: kept unless the model splits the text otherwise
FORCED_MISSES = 2  # a reply stops drafting forced tokens once the model turned the first one down this often in a row
_CANDIDATES = 256  # most recent earlier occurrences of the last token examined


def propose(token_ids, max_tokens: int, min_match: int = MIN_MATCH, max_match: int = MAX_MATCH) -> list[int]:
    """Up to `max_tokens` tokens that followed the latest earlier occurrence of the longest suffix of
    `token_ids` (min_match..max_match tokens long); [] when no suffix of `min_match` tokens occurred before."""
    if max_tokens <= 0 or len(token_ids) <= min_match:
        return []
    tokens = np.asarray(token_ids[-SEARCH_WINDOW:], dtype=np.int64)
    last = len(tokens) - 1
    ends = np.flatnonzero(tokens[:last] == tokens[last])[-_CANDIDATES:]  # earlier positions holding the last token
    ends = ends[ends >= min_match - 1]
    if not len(ends):
        return []
    matched = np.ones(len(ends), dtype=np.int64)  # suffix tokens each candidate matches, counting back
    alive = np.ones(len(ends), dtype=bool)
    for back in range(1, max_match):
        inside = ends - back >= 0
        alive &= inside & (tokens[np.maximum(ends - back, 0)] == tokens[last - back])
        if not alive.any():
            break
        matched += alive
    best = int(matched.max())
    if best < min_match:
        return []
    end = int(ends[np.flatnonzero(matched == best)[-1]])  # the most recent of the longest matches
    return tokens[end + 1:end + 1 + max_tokens].tolist()
