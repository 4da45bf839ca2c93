"""`dossier serve`: the engine behind an OpenAI-compatible HTTP API (engine/serve/)."""

from __future__ import annotations

from typing import Annotated

import typer

from engine.cli.options import (ATTENTION, DEVICE, DTYPE, GPU_MEMORY_UTILIZATION, KV_CACHE_GIB, MAX_BATCHED_TOKENS,
                                MODEL, THREADS, AttentionOpt, DeviceOpt, DtypeOpt, GpuMemoryOpt, MaxModelLenOpt,
                                KvCacheOpt, MaxBatchedTokensOpt, ModelOpt, PrefillFirstOpt, QUANTIZATION,
                                QuantizationOpt, SPECULATIVE_TOKENS, SpeculativeOpt, ThreadsOpt, parse_quantization, pip_extra)
from engine.serve.config import GRAMMAR_NEW_BURST, GRAMMAR_NEW_PER_S
from engine.serve.turn_wait import TURN_WAIT_S

__all__ = ["register"]


def serve(
    model: ModelOpt = MODEL,
    host: Annotated[str, typer.Option(help="Interface to listen on; anything but loopback needs --api-key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="DOSSIER_API_KEY", help="Every request must send 'Authorization: Bearer KEY' "
                     "(env DOSSIER_API_KEY)."),
    ] = None,
    served_model_name: Annotated[
        list[str] | None,
        typer.Option(help="Name(s) clients put in 'model' (repeatable; default: the --model value and the model's "
                     "own name)."),
    ] = None,
    kv_cache_gib: KvCacheOpt = KV_CACHE_GIB,
    gpu_memory_utilization: GpuMemoryOpt = GPU_MEMORY_UTILIZATION,
    max_model_len: MaxModelLenOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = MAX_BATCHED_TOKENS,
    device: DeviceOpt = DEVICE,
    dtype: DtypeOpt = DTYPE,
    attention: AttentionOpt = ATTENTION,
    quantization: QuantizationOpt = QUANTIZATION,
    threads: ThreadsOpt = THREADS,
    speculative_tokens: SpeculativeOpt = SPECULATIVE_TOKENS,
    prefill_first: PrefillFirstOpt = False,
    turn_wait_ms: Annotated[float, typer.Option(
        help="After a step that finished replies, wait up to this many ms for their next turns before stepping "
             "again, so an agent whose tool answers in milliseconds has its next prompt computed in that step "
             "rather than after it. Only while turns have come back this fast, and at most 10% of the time "
             "(engine/serve/turn_wait.py). 0: never wait.")] = TURN_WAIT_S * 1000,
    deterministic: Annotated[bool, typer.Option(
        "--deterministic/--no-deterministic",
        help="Batch-invariant inference (CPU): a request's logits do not depend on what else the server batches with "
             "it, at a cost in speed (docs/determinism.md). Off by default for serving.")] = False,
    max_request_mib: Annotated[float, typer.Option(help="Largest request body, MiB (base64 images count).")] = 32.0,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(help="A web page's origin (scheme://host[:port]) allowed to call the API from a browser "
                     "(repeatable). A request whose Origin header is another site's is refused with 403 (the "
                     "server's own origin is always allowed)."),
    ] = None,
    max_pinned_sessions: Annotated[int, typer.Option(help="Conversations pinned by session_id kept at once.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed for requests that sample without their own seed.")] = 0,
    ray: Annotated[str | None, typer.Option(help="Serve from engines on a Ray cluster: 'local' starts one here, 'auto' "
                                                 "joins the one `ray start --head` made, or HOST:PORT of its head. "
                                                 "Needs: " + pip_extra("ray") + ".")] = None,
    workers: Annotated[int, typer.Option(help="--ray: engines (Ray workers, 1 CPU each); each request goes to the "
                                              "one caching the longest prefix of its conversation.")] = 1,
    gpus_per_worker: Annotated[float, typer.Option(help="--ray: GPUs each worker reserves (0: CPU).")] = 0.0,
    max_schema_bytes: Annotated[int, typer.Option(help="Largest structured-output schema (response_format, or all "
                                                       "tools' parameters together), bytes: 400 beyond it.")] = 65536,
    max_schema_enum_values: Annotated[int, typer.Option(help="Most enum values (and consts) one schema holds: 400 "
                                                             "beyond it, before anything compiles.")] = 1024,
    max_schema_properties: Annotated[int, typer.Option(help="Most object properties one schema holds.")] = 1024,
    max_schema_depth: Annotated[int, typer.Option(help="Most levels of JSON objects and arrays nested in one "
                                                       "another in one schema.")] = 64,
    grammar_compile_timeout: Annotated[float, typer.Option(help="Seconds a request waits for its grammar to compile "
                                                                "(off the request threads); 503 past it.")] = 30.0,
    grammar_rate: Annotated[float, typer.Option(help="New structured-output grammars (schemas not seen before) "
                                                     "compiled per second; beyond it and a burst of "
                                                     "--grammar-burst, such requests get a 503 to retry. 0: no "
                                                     "rate.")] = GRAMMAR_NEW_PER_S,
    grammar_burst: Annotated[int, typer.Option(help="New grammars accepted at once after a quiet spell.")] = (
        GRAMMAR_NEW_BURST),
    head_timeout: Annotated[float, typer.Option(help="Seconds a client has to send a request's headers, from "
                                                     "connecting (or its first byte on a kept-alive connection); "
                                                     "the connection is closed past it.")] = 10.0,
    body_timeout: Annotated[float, typer.Option(help="Seconds a client has, after a request's headers, to send its "
                                                     "body (a 32 MiB body needs 4.5 Mbit/s at the default); the "
                                                     "connection is closed past it.")] = 60.0,
    limit_concurrency: Annotated[int, typer.Option(help="Open connections served at once; beyond it new requests "
                                                        "get a 503.")] = 512,
) -> None:
    """Serve a model over the OpenAI API (chat, completions, tools, JSON schema, streaming, images).

    One engine steps in its own thread and batches the requests of every connection; a
    conversation re-sent whole each turn is served from the prefix cache, and the extra body
    field `session_id` pins its KV cache between turns. Listens on 127.0.0.1 unless given
    --host and --api-key. Stop with Ctrl-C.

    Example:
        $ dossier serve --port 8000 --kv-cache-gib 1
        dossier serve: SmolLM2-135M-Instruct at http://127.0.0.1:8000/v1 (model names: default, SmolLM2-135M-Instruct)
        context 8192 tokens · KV pool 23296 tokens · attention numba · device cpu · Ctrl-C stops
        $ curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' -d '{"model": "default",
            "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12, "temperature": 0}'
        {"id":"chatcmpl-db7d...","object":"chat.completion","created":1796080747,"model":"default","choices":[{"index":0,
         "message":{"role":"assistant","content":"The capital of France is Paris."},"finish_reason":"stop","logprobs":null}],
         "usage":{"prompt_tokens":37,"completion_tokens":8,"total_tokens":45,"prompt_tokens_details":{"cached_tokens":0}}}
    """
    from engine.core.config import EngineConfig
    from engine.serve.config import ServeConfig
    from tools.errors import DossierError

    # check the server settings before the model loads (seconds): a bad --host fails at once
    origins = tuple(allowed_origin or ())
    if not turn_wait_ms >= 0:
        raise DossierError(f"--turn-wait-ms must be 0 (never wait) or more (got {turn_wait_ms:g})")
    limits = dict(max_schema_bytes=max_schema_bytes, max_schema_enum_values=max_schema_enum_values,
                  max_schema_properties=max_schema_properties, max_schema_depth=max_schema_depth,
                  head_timeout_s=head_timeout, body_timeout_s=body_timeout,
                  limit_concurrency=limit_concurrency)
    ServeConfig(host=host, port=port, api_key=api_key, max_request_bytes=int(max_request_mib * 2**20),
                max_pinned_sessions=max_pinned_sessions, allowed_origins=origins, **limits)
    from engine.cli.options import parse_threads, set_threads
    from engine.core.threads import spin_briefly_if_adaptive

    threads = parse_threads(threads)  # None: adapt to the load
    # before torch loads OpenMP: with the thread count following the load, idle threads may spin ~0.1 ms
    spin_briefly_if_adaptive(threads is None and not deterministic and ray is None)
    from engine.core.llm_engine import Engine
    from engine.serve.app import build_app
    from engine.serve.backend import LocalBackend
    from engine.serve.server import serve_forever

    if threads:
        set_threads(threads)
    engine_kwargs = dict(kv_cache_gib=kv_cache_gib, gpu_memory_utilization=gpu_memory_utilization,
                         max_model_len=max_model_len,
                         max_num_batched_tokens=max_batched_tokens, device=device,
                         dtype=dtype, attention_backend=attention, seed=seed, quantization=parse_quantization(quantization),
                         cpu_threads=threads, grammar_compile_timeout_s=grammar_compile_timeout,
                         grammar_new_per_s=grammar_rate, grammar_new_burst=grammar_burst,
                         deterministic=deterministic, speculative_tokens=speculative_tokens,
                         prefill_first=prefill_first)
    engine_config = EngineConfig(**engine_kwargs)  # built once; bad engine options fail before anything loads
    if ray is not None:
        return _serve_on_ray(ray, workers, gpus_per_worker, model, engine_config, served_model_name, host, port,
                             api_key, max_request_mib, max_pinned_sessions, origins, limits, turn_wait_ms / 1000)
    engine = Engine.from_pretrained(model, engine_config)
    if engine.processor is None:
        raise DossierError(f"model {model!r} has no tokenizer (a random-weight shape); dossier serve needs a model "
                           "folder or GGUF file with a tokenizer and chat template")
    names = tuple(served_model_name or dict.fromkeys([model, engine.adapter.name]))
    config = ServeConfig(host=host, port=port, api_key=api_key, served_model_names=names,
                         max_request_bytes=int(max_request_mib * 2**20), max_pinned_sessions=max_pinned_sessions,
                         allowed_origins=origins, **limits)
    backend = LocalBackend(engine, max_pinned_sessions, turn_wait_s=turn_wait_ms / 1000)
    backend.start()
    stats = engine.stats()

    def ready(url: str) -> None:
        typer.echo(f"dossier serve: {engine.adapter.name} at {url}/v1 (model names: {', '.join(names)})", err=True)
        typer.echo(f"context {engine.adapter.shape.max_positions} tokens · {engine.pool_line()} · attention "
                   f"{stats['attention_backend']} · device {engine.runner.device} · Ctrl-C stops", err=True)

    try:
        serve_forever(build_app(backend, config), config, on_ready=ready)
    finally:
        backend.stop()


def _serve_on_ray(address, workers, gpus_per_worker, model, engine_config, served_model_name, host, port, api_key,
                  max_request_mib, max_pinned_sessions, origins=(), limits=None,
                  turn_wait_s: float = TURN_WAIT_S) -> None:
    """The same server with its engines on Ray workers and a prefix-aware router in front (engine/distributed/)."""
    from engine.distributed.router import RayServeBackend
    from engine.serve.app import build_app
    from engine.serve.config import ServeConfig
    from engine.serve.server import serve_forever

    backend = RayServeBackend.start(address, workers, gpus_per_worker, model, engine_config, max_pinned_sessions,
                                    turn_wait_s=turn_wait_s)
    try:
        first = backend.infos[0]
        names = tuple(served_model_name or dict.fromkeys([model, first["name"]]))
        config = ServeConfig(host=host, port=port, api_key=api_key, served_model_names=names,
                             max_request_bytes=int(max_request_mib * 2**20), max_pinned_sessions=max_pinned_sessions,
                             allowed_origins=origins, **(limits or {}))
        hosts = sorted({info["host"] for info in backend.infos})

        def ready(url: str) -> None:
            typer.echo(f"dossier serve: {first['name']} at {url}/v1 (model names: {', '.join(names)})", err=True)
            typer.echo(f"{workers} Ray workers on {', '.join(hosts)} · context {backend.max_context} tokens · KV pool "
                       f"{first['kv_tokens']} tokens each · device {first['device']} · routing: session, then "
                       "longest cached prefix, then least loaded · Ctrl-C stops", err=True)

        serve_forever(build_app(backend, config), config, on_ready=ready)
    finally:
        backend.stop()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
