"""Run by tests/engine/test_triton_engine.py in a subprocess with TRITON_INTERPRET=1.

The deterministic mode's GPU attention (`InvariantTritonBackend`: every row, decode rows too, through the
varlen kernel), interpreted on the CPU, through issue 48's acceptance scenarios of
tests/engine/test_batch_invariance.py (one at a time, together, shuffled with preemption, chunks of 7 and
64, interrupted and resumed, cached prefixes) on its tiny random Llama in float32; then the same runs with
the default Triton backend (split-K decode) for contrast. Prints one JSON object: per mode, the backend and
each scenario's differences from the one-at-a-time run.
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


def triton_engine(folder, dtype, deterministic, **overrides):
    engine = _engine(folder, dtype, deterministic, **{"attention_backend": "triton", **overrides})
    backends.append(type(engine.runner.attention).__name__)
    return engine


def main() -> None:
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
