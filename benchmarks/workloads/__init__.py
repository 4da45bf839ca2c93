"""Synthetic workloads and timing harnesses for the kernels, shared by `dossier bench` and benchmarks/."""

from .bm25_synthetic import SyntheticRecipe, build_score_matrix, default_cache_dir, load_or_build, sample_tokens

__all__ = ["SyntheticRecipe", "build_score_matrix", "default_cache_dir", "load_or_build", "sample_tokens"]
