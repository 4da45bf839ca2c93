"""Numba and Triton kernels, each beside a plain reference implementation."""

__all__: list[str] = []
