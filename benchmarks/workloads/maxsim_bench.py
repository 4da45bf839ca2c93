"""MaxSim benchmark: our CPU (or CUDA) kernel against colpali's einsum formula on the same vectors.

Used by `dossier bench maxsim` and `benchmarks/bench_maxsim.py`. Random unit vectors (a fixed
seed) in the requested storage dtype; both sides score the same stored values (on a CPU the
einsum dequantizes to fp32 first; on CUDA it runs in fp16/bf16, as colpali-engine does). Calls are interleaved and the p50 of each is
reported with the ratio, the max relative difference, and the load average (the machine is
shared; CPU figures are only comparable within one run).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from kernels.maxsim import einsum_maxsim_padded, maxsim

__all__ = ["random_pages", "run_maxsim_bench"]


def random_pages(pages: int, vectors: int, dim: int, query_vectors: int, dtype: str, seed: int,
                 device: str = "cpu"):
    """(query, stored (pages*vectors, dim), scales or None, offsets) with unit-norm rows."""
    gen = torch.Generator().manual_seed(seed)
    flat = torch.nn.functional.normalize(torch.randn(pages * vectors, dim, generator=gen), dim=-1)
    query = torch.nn.functional.normalize(torch.randn(query_vectors, dim, generator=gen), dim=-1)
    scales = None
    if dtype == "int8":
        scales = flat.abs().amax(dim=1) / 127.0
        stored = torch.round(flat / scales[:, None]).to(torch.int8)
    elif dtype in ("float32", "float16", "bfloat16"):
        stored = flat.to(getattr(torch, dtype))
    else:
        raise ValueError(f"dtype must be float32, float16, bfloat16 or int8, got {dtype!r}")
    offsets = torch.arange(pages + 1, dtype=torch.int64) * vectors
    to = (lambda t: None if t is None else t.to(device))
    return to(query), to(stored), to(scales), to(offsets)


def _einsum(query, stored, scales, pages: int, vectors: int):
    """colpali's einsum formula; on CUDA in the stored half dtype (as colpali runs it), else fp32."""
    if stored.is_cuda and stored.dtype in (torch.float16, torch.bfloat16):
        page_vectors = stored.view(pages, vectors, -1)
        sims = torch.einsum("bnd,csd->bcns", query[None].to(stored.dtype), page_vectors)
        return sims.max(dim=3)[0].float().sum(dim=2)[0]
    page_vectors = stored.float() if scales is None else stored.float() * scales[:, None]
    return einsum_maxsim_padded(query[None], page_vectors.view(pages, vectors, -1))[0]


def run_maxsim_bench(pages: int = 100, vectors: int = 768, dim: int = 128, query_vectors: int = 32,
                     dtype: str = "float16", repeats: int = 30, seed: int = 0, device: str = "cpu") -> dict:
    """Time both sides `repeats` times (interleaved) and check they agree; returns the figures."""
    query, stored, scales, offsets = random_pages(pages, vectors, dim, query_vectors, dtype, seed, device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    ours = lambda: maxsim(query, stored, offsets, scales=scales)  # noqa: E731
    peer = lambda: _einsum(query, stored, scales, pages, vectors)  # noqa: E731
    got, ref = ours(), peer()  # warm-up, and the parity figures
    rel = ((got.float().cpu() - ref.cpu()).abs() / ref.cpu().abs().clamp_min(1e-6))
    times: dict[str, list[float]] = {"ours": [], "einsum": []}
    for _ in range(repeats):
        for name, fn in (("ours", ours), ("einsum", peer)):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    p50 = {name: statistics.median(t) for name, t in times.items()}
    return {
        "pages": pages, "vectors_per_page": vectors, "dim": dim, "query_vectors": query_vectors, "dtype": dtype,
        "device": device, "threads": torch.get_num_threads(),
        "p50_ms_ours": round(1000 * p50["ours"], 3), "p50_ms_einsum": round(1000 * p50["einsum"], 3),
        "min_ms_ours": round(1000 * min(times["ours"]), 3), "min_ms_einsum": round(1000 * min(times["einsum"]), 3),
        "ratio_vs_einsum": round(p50["einsum"] / p50["ours"], 2),
        "max_rel_diff": float(rel.max()), "mean_rel_diff": float(rel.mean()),
        "page_bytes": int(stored.numel() * stored.element_size()),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
