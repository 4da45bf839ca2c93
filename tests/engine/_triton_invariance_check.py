"""Run by tests/engine/test_triton_engine.py in a subprocess with TRITON_INTERPRET=1.

The deterministic mode's GPU attention (`InvariantTritonBackend`: every row, decode rows too, through the
varlen kernel), interpreted on the CPU, through issue 48's acceptance scenarios of
tests/engine/test_batch_invariance.py (one at a time, together, shuffled with preemption, chunks of 7 and
64, interrupted and resumed, cached prefixes) on its tiny random Llama in float32; then the same runs with
the default Triton backend (split-K decode) for contrast. Prints one JSON object: per mode, the backend and
each scenario's differences from the one-at-a-time run.

The interpreter's `tl.dot` is numpy's matmul, and numpy's BLAS need not give a row the same bits at every
position of a tile: OpenBLAS's Haswell kernels (the ones it picks on an AMD EPYC, AVX-512 or not) sum an edge
row in another order than an inner one (seen 2026-12-06: a 16x64 @ 64x16 product, rows rolled by 3, 6 of 16
rows differ in their last bits; on the AMX Xeon none did). A GPU's `tl.dot` has one per-element order for
every row of a tile shape, which is what the backend's docstring relies on, so the check below gives the
interpreter such a dot: the products summed over k in order, the same code for every row.
"""

import json
import os
import sys
import tempfile

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.engine import test_batch_invariance as scenarios  # noqa: E402
from tests.engine.conftest import build_model, build_tokenizer  # noqa: E402

backends = []
_engine = scenarios._engine


def _ordered_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """InterpreterBuilder.create_dot with one summation order per output element, whatever its row."""
    from triton.runtime.interpreter import TensorHandle

    a_data, b_data = a.data, b.data
    assert a_data.ndim == 2 and a.dtype.primitive_bitwidth > 8, "the check's kernels take 2-D float dots"
    out = d.data.copy()
    for k in range(a_data.shape[1]):
        out += a_data[:, k:k + 1].astype(out.dtype) * b_data[k:k + 1, :].astype(out.dtype)
    return TensorHandle(out, d.dtype.scalar)


def triton_engine(folder, dtype, deterministic, **overrides):
    engine = _engine(folder, dtype, deterministic, **{"attention_backend": "triton", **overrides})
    backends.append(type(engine.runner.attention).__name__)
    return engine


def main() -> None:
    from triton.runtime.interpreter import InterpreterBuilder

    InterpreterBuilder.create_dot = _ordered_dot
    scenarios._engine = triton_engine
    folder = tempfile.mkdtemp(prefix="triton-invariant-")
    build_model("llama").save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    report = {}
    for deterministic in (True, False):
        backends.clear()
        differences = scenarios._all_runs(folder, "float32", deterministic)
        report["deterministic" if deterministic else "default"] = {
            "backends": sorted(set(backends)), "differences": {k: v[:3] for k, v in differences.items()}}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
