"""Two processes loading the same GGUF at once convert it once (models/loading.py: _conversion_lock).

Seen 2026-12-06: two results runs started the same bf16 row together; the second conversion to finish
deleted the first's directory while the first was loading from it ("has no *.safetensors weights").
"""

import hashlib
import threading
import time

import torch

from models import loading


def test_a_conversion_waits_for_the_one_under_way_and_uses_its_result(tmp_path, monkeypatch):
    monkeypatch.setenv("DOSSIER_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not a real gguf: a second conversion would fail to read it")
    converted = []
    monkeypatch.setattr(loading, "_convert", lambda *args: converted.append(args) or args[2])

    target = None
    holding = threading.Event()

    def first_process():  # holds the lock while it "converts", then leaves the finished model behind
        nonlocal target
        stat = gguf.stat()  # the cache name _converted_gguf gives this file in bf16
        key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        target = loading.cache_root() / "models" / f"{gguf.stem}-{key}-bfloat16"
        target.parent.mkdir(parents=True)
        with loading._conversion_lock(target, gguf.name):
            holding.set()
            time.sleep(0.5)
            target.mkdir()
            (target / "model.safetensors").write_bytes(b"weights")

    thread = threading.Thread(target=first_process)
    thread.start()
    holding.wait(5)
    started = time.perf_counter()
    result = loading._converted_gguf(gguf, torch.bfloat16)
    thread.join()
    assert result == target and (result / "model.safetensors").read_bytes() == b"weights"
    assert converted == [], "converted again instead of using the conversion it waited for"
    assert time.perf_counter() - started > 0.3, "did not wait for the conversion under way"
