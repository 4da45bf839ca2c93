"""The interpreted parity cases of the Triton paged-attention kernels, and how their inputs are built.

Kept apart from `_paged_attention_check.py` (which needs TRITON_INTERPRET=1 before importing
triton) so the tests can import the case list and the builder.
"""

import torch

# name: (kernel, dtype, heads, kv_heads, head_dim, block_size, [(q_len, context), ...], options)
CASES = {
    # prefill chunks: a whole prompt, chunks after cached prefixes, one ending exactly on a block
    # boundary, one decode row mixed in; GQA 2
    "prefill_fp32_gqa2": ("prefill", torch.float32, 4, 2, 16, 4, [(5, 5), (7, 19), (1, 9), (20, 44)], {}),
    # the same in bf16, head_dim not a power of two, MHA
    "prefill_bf16_mha_d24": ("prefill", torch.bfloat16, 2, 2, 24, 8, [(9, 9), (17, 40), (3, 16)], {}),
    # a query tile boundary inside a chunk (block_m 16), GQA 4, fp16
    "prefill_fp16_gqa4_tiles": ("prefill", torch.float16, 4, 1, 16, 16, [(33, 50), (2, 2)], {"block_m": 16}),
    # sliding window of 6 keys (Gemma-3 local layers)
    "prefill_fp32_window": ("prefill", torch.float32, 2, 1, 16, 4, [(12, 12), (6, 30)], {"window": 6}),
    # bidirectional images (Gemma-3): rows of an image see its later keys too; one image in a prompt from 0, one in
    # a chunk after a cached prefix (rows at positions 21..29, image 23..27); then a window of 3, shorter than an image
    "prefill_fp32_images": ("prefill", torch.float32, 4, 2, 16, 4, [(12, 12), (9, 30)],
                            {"images": [(3, 8), (23, 28)]}),
    "prefill_bf16_images_window": ("prefill", torch.bfloat16, 2, 1, 16, 4, [(12, 12), (9, 30)],
                                   {"images": [(3, 8), (23, 28)], "window": 3, "block_m": 16}),
    # GQA-grouped prefill (one program per KV head reads each K/V tile for its whole group): groups of 1, 4, 7
    # (padded to 8) and 8 at the head sizes of the families the engine serves (64, 80, 128, 256)
    "prefill_fp32_gqa1_d64": ("prefill", torch.float32, 2, 2, 64, 4, [(5, 5), (3, 11)], {}),
    "prefill_bf16_gqa4_d80": ("prefill", torch.bfloat16, 8, 2, 80, 8, [(9, 9), (4, 20)], {}),
    "prefill_fp16_gqa7_d128": ("prefill", torch.float16, 7, 1, 128, 16, [(6, 6), (3, 21), (1, 9)], {"block_m": 16}),
    "prefill_fp32_gqa8_d256": ("prefill", torch.float32, 8, 1, 256, 16, [(4, 4), (2, 18)], {}),
    # decode, split-K over 32-key splits, contexts across block boundaries, GQA 4
    "decode_fp32_gqa4_split": ("decode", torch.float32, 8, 2, 16, 4, [(1, 1), (1, 16), (1, 33), (1, 97)],
                               {"split_len": 32}),
    # decode bf16, GQA 8 (Llama-3 ratio), head_dim 32, one split per sequence
    "decode_bf16_gqa8": ("decode", torch.bfloat16, 8, 1, 32, 16, [(1, 5), (1, 64), (1, 70)], {"split_len": 128}),
    # decode fp16, MHA, sliding window across splits
    "decode_fp16_window": ("decode", torch.float16, 2, 2, 16, 8, [(1, 40), (1, 7)], {"split_len": 32, "window": 10}),
}


def build(dtype, heads, kv_heads, head_dim, block_size, lengths, seed=0):
    """Random q, a scattered paged cache and the metadata for the (q_len, context) pairs."""
    gen = torch.Generator().manual_seed(seed)
    tables = []
    pool = sum(-(-ctx // block_size) for _, ctx in lengths) + 3
    order = torch.randperm(pool, generator=gen).tolist()  # non-contiguous blocks
    for _, ctx in lengths:
        need = -(-ctx // block_size)
        tables.append(order[:need])
        order = order[need:]
    width = max(len(t) for t in tables)
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    k_cache = torch.randn(pool, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    v_cache = torch.randn(pool, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    q_lens = [q for q, _ in lengths]
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(sum(q_lens), heads, head_dim, generator=gen).to(dtype)
    context = torch.tensor([c for _, c in lengths], dtype=torch.int32)
    return q, k_cache, v_cache, cu, context, block_tables


CASE_NAMES = list(CASES)


def image_spans(lengths, images) -> torch.Tensor:
    """(2, tokens) int32 [start, end) of each row's image: `images` gives one (start, end) per sequence, in positions."""
    rows = []
    for (q_len, context), (start, end) in zip(lengths, images):
        positions = torch.arange(context - q_len, context)
        inside = (positions >= start) & (positions < end)
        rows.append(torch.stack([torch.where(inside, start, 0), torch.where(inside, end, 0)]))
    return torch.cat(rows, dim=1).to(torch.int32).contiguous()
