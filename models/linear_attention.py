"""A Gated DeltaNet decoder layer (Qwen3.5's linear-attention layers) over the engine's per-sequence states.

Where an attention layer reads a growing KV cache, this layer keeps per sequence a fixed-size state:
the last `conv_width - 1` inputs of its causal convolution and the DeltaNet matrix of each value head
(`kernels/gated_delta_rule.py`). The engine hands every layer a `StepStates` through the attention
callable (`attention.recurrent`): the step's segments (one per scheduled chunk: rows, sequence, first
position) and where each sequence's state lives. A chunk starting at position 0 starts from zeros;
any other continues the state the sequence's previous chunk left, so chunked prefill and a session's
next turn compute only their new tokens.

transformers' Qwen3_5GatedDeltaNet is the reference, operation by operation: in_proj_qkv (then the
conv and SiLU), in_proj_z (the output gate), in_proj_b (beta = sigmoid) and in_proj_a (decay
g = -exp(A_log) * softplus(a + dt_bias)); q and k L2-normalised; the output RMS-normalised per head and
multiplied by SiLU(z) (`GatedRMSNorm`), then out_proj. The four input projections are one fused
matmul here. The MLP half of the layer is `DecoderLayer`'s.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.gated_delta_rule import causal_conv1d, causal_conv1d_step, chunked, prepare, recurrent_step
from models.decoder import DecoderLayer, LayerSpec, RMSNorm

__all__ = ["GatedDeltaNetLayer", "LinearSpec", "GatedRMSNorm"]


class LinearSpec:
    """The linear-attention shapes of a Qwen3.5-style config."""

    def __init__(self, config) -> None:
        self.key_heads = config.linear_num_key_heads
        self.value_heads = config.linear_num_value_heads
        self.key_dim = config.linear_key_head_dim
        self.value_dim = config.linear_value_head_dim
        self.conv_width = config.linear_conv_kernel_dim
        self.eps = config.rms_norm_eps

    @property
    def conv_channels(self) -> int:  # q, k and v go through the convolution
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim

    def state_bytes(self) -> int:
        """float32 bytes of one sequence's state in one layer (conv window and DeltaNet matrices)."""
        return 4 * (self.conv_channels * (self.conv_width - 1) + self.value_heads * self.key_dim * self.value_dim)


class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head's output, then times SiLU(gate) (transformers' Qwen3_5RMSNormGated)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        x = self.weight * x.to(dtype)
        return (x * F.silu(gate.float())).to(dtype)


class GatedDeltaNetLayer(DecoderLayer):
    """One pre-norm layer whose token mixer is a Gated DeltaNet; the MLP half is DecoderLayer's."""

    recurrent = True  # the engine keeps a state per sequence for this layer

    def __init__(self, spec: LayerSpec, linear: LinearSpec, index: int) -> None:
        nn.Module.__init__(self)  # not DecoderLayer's attention projections: only its MLP parts below
        from transformers.activations import ACT2FN

        self.spec, self.linear, self.index, self.window, self.variant = spec, linear, index, None, None
        hidden = spec.hidden
        self.in_proj = nn.Linear(hidden, linear.conv_channels + linear.value_heads * linear.value_dim
                                 + 2 * linear.value_heads, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(linear.conv_channels, 1, linear.conv_width))
        self.dt_bias = nn.Parameter(torch.ones(linear.value_heads))
        self.A_log = nn.Parameter(torch.zeros(linear.value_heads))
        self.gdn_norm = GatedRMSNorm(linear.value_dim, linear.eps)
        self.out_proj = nn.Linear(linear.value_heads * linear.value_dim, hidden, bias=False)
        self.gate_up_proj = nn.Linear(hidden, 2 * spec.intermediate, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.intermediate, hidden, bias=spec.mlp_bias)
        self.act = F.silu if spec.activation in ("silu", "swish") else ACT2FN[spec.activation]
        self.attn_norm = RMSNorm(hidden, spec.eps, spec.norm_offset)
        self.mlp_norm = RMSNorm(hidden, spec.eps, spec.norm_offset)
        self.q_norm = self.k_norm = self.attn_out_norm = self.mlp_out_norm = None
        self.row_tile = None

    def hf_sources(self, prefix: str) -> list[tuple[str, list[str]]]:
        """(our parameter, the HF tensors concatenated into it): see models/weights.py."""
        p, hf = prefix, prefix + "linear_attn."
        return [(p + "in_proj.weight", [hf + f"in_proj_{n}.weight" for n in ("qkv", "z", "b", "a")]),
                (p + "conv_weight", [hf + "conv1d.weight"]), (p + "dt_bias", [hf + "dt_bias"]),
                (p + "A_log", [hf + "A_log"]), (p + "gdn_norm.weight", [hf + "norm.weight"]),
                (p + "out_proj.weight", [hf + "out_proj.weight"])]

    def hf_rows(self, hf_name: str) -> int | None:
        """Rows of one HF input projection inside our fused `in_proj`; None for the MLP's (DecoderLayer's rule)."""
        linear = self.linear
        if "in_proj_qkv" in hf_name:
            return linear.conv_channels
        if "in_proj_z" in hf_name:
            return linear.value_heads * linear.value_dim
        if "in_proj_b" in hf_name or "in_proj_a" in hf_name:
            return linear.value_heads
        return None

    def forward(self, x: torch.Tensor, cos_sin, rotary, attention) -> torch.Tensor:
        mixed = self._mix(self._project(self.in_proj, self._each(self.attn_norm, x)), attention.recurrent)
        x = x + self._project(self.out_proj, mixed)
        return x + self._mlp_block(x)

    def _mix(self, projected: torch.Tensor, states) -> torch.Tensor:
        """The Gated DeltaNet over each sequence's rows of the step, each from (and back into) its state."""
        linear = self.linear
        heads, value_dim = linear.value_heads, linear.value_dim
        qkv, z, b, a = projected.split([linear.conv_channels, heads * value_dim, heads, heads], -1)
        beta = b.float().sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        out = torch.empty(projected.shape[0], heads, value_dim, dtype=torch.float32, device=projected.device)
        weight = self.conv_weight[:, 0, :]
        decodes = []  # (segment, conv window, state) of each decode token: conv and DeltaNet batched below
        for segment in states.segments:
            conv_state, state = states.load(self.index, segment)
            if segment.length == 1 and state is not None:
                decodes.append((segment, conv_state, state))
                continue
            # a prefill, in pieces that end at its checkpoints (a shared prefix's later readers resume there)
            cuts = [position - segment.start for position, _ in segment.checkpoints] + [segment.length]
            begin = 0
            for cut, point in zip(cuts, [*segment.checkpoints, None]):
                if cut <= begin:
                    continue
                rows = slice(segment.row + begin, segment.row + cut)
                mixed, conv_state = causal_conv1d(qkv[rows], weight, None, conv_state)
                q, k, v = self._split_heads(mixed)
                out[rows], state = chunked(q, k, v, g[rows], beta[rows], state)
                if point is not None:
                    states.checkpoint(self.index, point[1], conv_state, state)
                begin = cut
            states.store(self.index, segment, conv_state, state)
        if decodes:
            rows = torch.tensor([segment.row for segment, _, _ in decodes], device=projected.device)
            mixed, conv_states = causal_conv1d_step(qkv[rows], weight, torch.stack([c for _, c, _ in decodes]))
            q, k, v = self._split_heads(mixed)
            new, next_states = recurrent_step(q, k, v, g[rows], beta[rows], torch.stack([s for _, _, s in decodes]))
            out[rows] = new
            for (segment, _, _), conv_state, state in zip(decodes, conv_states, next_states):
                states.store(self.index, segment, conv_state, state)
        normed = self.gdn_norm(out.to(projected.dtype), z.view(-1, heads, value_dim))
        return normed.reshape(projected.shape[0], heads * value_dim)

    def _split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        linear = self.linear
        key_width = linear.key_heads * linear.key_dim
        q, k, v = mixed.split([key_width, key_width, linear.value_heads * linear.value_dim], -1)
        tokens = mixed.shape[0]
        q, k = prepare(q.view(tokens, linear.key_heads, linear.key_dim), k.view(tokens, linear.key_heads, linear.key_dim),
                       linear.value_heads)
        return q, k, v.view(tokens, linear.value_heads, linear.value_dim).float()
