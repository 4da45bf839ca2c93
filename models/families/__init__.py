"""Model families, one file each, registered in one table in models/registry.py."""

__all__: list[str] = []
