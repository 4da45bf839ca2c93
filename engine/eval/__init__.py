"""Evaluation: metrics of MADQA, MuDABench and DocVQA-2026, statistics and reports."""

__all__: list[str] = []
