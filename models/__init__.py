"""Model adapters: loading from a local directory or GGUF, chat templates, per-family processing."""

__all__: list[str] = []
