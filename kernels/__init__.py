"""Numba and Triton kernels, each beside a plain reference implementation.

The names below are loaded on first use (PEP 562): `from kernels import topk` imports the BM25
kernels only, so a BM25 search never imports torch, which the MaxSim kernels need (about a second
on a CPU of this project's machines; `dossier search` answers in less).
"""

from __future__ import annotations

import importlib

_WHERE = {"BM25_BACKENDS": ("bm25", "BACKENDS"), "ScoreMatrix": ("bm25", "ScoreMatrix"), "topk": ("bm25", "topk"),
          "topk_batch": ("bm25", "topk_batch"), "topk_reference": ("bm25", "topk_reference"),
          "MAXSIM_BACKENDS": ("maxsim", "MAXSIM_BACKENDS"), "einsum_maxsim_padded": ("maxsim", "einsum_maxsim_padded"),
          "maxsim": ("maxsim", "maxsim"), "maxsim_reference": ("maxsim", "maxsim_reference")}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    module, attribute = _WHERE[name]
    value = getattr(importlib.import_module(f"kernels.{module}"), attribute)
    globals()[name] = value
    return value
