"""Per-item metrics: ANLS*, Page/Doc F1, Kuiper effort calibration, DocVQA-2026, MuDABench and retrieval quality."""

__all__: list[str] = []
