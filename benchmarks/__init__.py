"""Benchmarks: ours and the strongest fair peer on the same input, in one run, with the ratio.

An importable package: `dossier bench ...` runs the workloads defined here (`engine_sessions`,
`engine_images`, `workloads/`), and the `bench_*.py` scripts beside them run the same code
standalone. Benchmarks may import any layer; nothing but the CLI imports them.
"""

__all__: list[str] = []
