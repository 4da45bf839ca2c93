"""A live `dossier serve` on a tiny random model (the engine tests' Llama and tokenizer), in a thread.

The server is the real app (routes, guard, uvicorn) on 127.0.0.1 and a free port; tests talk
to it with the official `openai` client, as a harness would.
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("fastapi", reason="dossier serve needs fastapi (pip install 'dossier[serve]')")
pytest.importorskip("openai", reason="the serve tests use the official openai client (pip install 'dossier[dev]')")


class Live:
    """A running server: its URL, backend (for counters) and an openai client."""

    def __init__(self, url, backend, model_name, timeout: float = 120):
        from openai import OpenAI

        self.url, self.backend, self.model = url, backend, model_name
        self.client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)

    def stats(self) -> dict:
        import httpx2

        return httpx2.get(self.url + "/stats", timeout=30).json()


def start(folder, name: str, **engine_config):
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine
    from engine.serve.app import build_app
    from engine.serve.backend import LocalBackend
    from engine.serve.config import ServeConfig
    from engine.serve.server import ServerThread

    engine_config.setdefault("block_size", 4)
    # float32 like the HF references: session fixtures are built before conftest's function-scoped pin of
    # "auto", and "auto" is bf16 on a CPU with avx512_bf16
    engine_config.setdefault("dtype", "float32")
    engine_config.setdefault("num_kv_blocks", 1024)
    engine = Engine.from_pretrained(str(folder), EngineConfig(**engine_config))
    backend = LocalBackend(engine)
    backend.start()
    thread = ServerThread(build_app(backend, ServeConfig(served_model_names=(name,), max_request_bytes=2**20,
                                                         max_image_pixels=4_000_000)))
    return thread, backend


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """(folder, HF reference model, tokenizer) of the engine tests' 2-layer random Llama."""
    from tests.engine.conftest import build_model, build_tokenizer

    folder = tmp_path_factory.mktemp("serve-tiny")
    tokenizer, model = build_tokenizer(), build_model("llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model, tokenizer


@pytest.fixture(scope="session")
def live(tiny_folder):
    """The tiny Llama behind a live server (one for the whole run: tests compare counters before and after)."""
    thread, backend = start(tiny_folder[0], "tiny", attention_backend="sdpa")
    with thread as url:
        yield Live(url, backend, "tiny")
    backend.stop()


@pytest.fixture(scope="session")
def vl_live(tmp_path_factory):
    """A tiny random Qwen2-VL (the VL tests' builder) behind a live server."""
    from tests.vlm.conftest import save_model

    folder = tmp_path_factory.mktemp("serve-qwen2-vl")
    save_model(folder, "qwen2_vl")
    thread, backend = start(folder, "tiny-vl", image_max_pixels=84 * 84)
    with thread as url:
        yield Live(url, backend, "tiny-vl")
    backend.stop()
