"""Run by tests/kernels/test_maxsim_triton.py in a subprocess with TRITON_INTERPRET=1.

Prints one JSON object: for each storage dtype, the max and mean relative difference between
the fused Triton kernel (interpreted on the CPU) and the einsum reference.
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from kernels.maxsim import maxsim, maxsim_reference  # noqa: E402
from kernels.maxsim_triton import maxsim_batch_triton  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    dim, n_q = 32, 5
    lengths = torch.tensor([7, 0, 33, 16, 70, 1])  # ragged, an empty page, tiles of 16 cut mid-page
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    vectors = torch.nn.functional.normalize(torch.randn(int(offsets[-1]), dim), dim=-1)
    query = torch.nn.functional.normalize(torch.randn(n_q, dim), dim=-1)
    weights = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0])
    page_ids = torch.tensor([4, 1, 0, 2, 5, 3])
    report = {}
    for name, dtype in [("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16),
                        ("int8", torch.int8)]:
        scales = None
        stored = vectors.to(dtype) if dtype != torch.int8 else None
        if dtype == torch.int8:
            scales = vectors.abs().amax(dim=1) / 127.0
            stored = torch.round(vectors / scales[:, None]).to(torch.int8)
        ref = maxsim_reference(query, stored, offsets, page_ids=page_ids, scales=scales, query_weights=weights)
        got = maxsim(query, stored, offsets, page_ids=page_ids, scales=scales, query_weights=weights,
                     backend="triton")
        rel = (got - ref).abs() / ref.abs().clamp_min(1e-6)
        report[name] = {"max_rel": rel.max().item(), "mean_rel": rel.mean().item(),
                        "empty_page_score": got[1].item()}
    # batch: two queries of different lengths with their own candidates
    queries = torch.zeros(2, n_q, dim)
    queries[0] = query
    queries[1, :3] = query[:3] * -1
    q_len = torch.tensor([5, 3])
    ids = torch.tensor([[0, 2, 4], [5, 4, 3]])
    batch = maxsim_batch_triton(queries, q_len, vectors, offsets, ids)
    ref = torch.stack([maxsim_reference(queries[b, :q_len[b]], vectors, offsets, page_ids=ids[b]) for b in range(2)])
    report["batch"] = {"max_rel": ((batch - ref).abs() / ref.abs().clamp_min(1e-6)).max().item()}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
