"""Rotary position embeddings as a position strategy: positions in, per-layer cos/sin out, q/k rotated.

One `Rotary` serves every family:
- 1-D RoPE (text models): one position per token;
- M-RoPE (Qwen2/2.5/3-VL, GLM-4V): three positions per token (time, height, width), and
  each rotary frequency is driven by one of them (`RopeSpec.axes`, see `mrope_axes`);
- several frequency tables in one model (Gemma-3: local layers use base 10,000, global
  layers 1,000,000): one table per `variant`, each layer naming the one it uses, each table with
  its own rotated width where the layer kinds' heads differ (Gemma 4: 256 and 512 channels);
- partial rotation (GLM-4V rotates the first half of each head) and rotation of adjacent
  channel pairs instead of the two halves (GLM).

Frequencies follow transformers' ROPE_INIT_FUNCTIONS for the config, so scaled RoPE
types (llama3, linear, yarn) give the same angles as the HF model. Dynamic NTK scaling
changes the frequencies with the sequence length and is refused.
"""

from dataclasses import dataclass

import torch

from tools.errors import DossierError

__all__ = ["RopeSpec", "Rotary", "mrope_axes", "rope_frequencies", "rotate_half", "rotate_pairs"]


@dataclass(frozen=True, slots=True)
class RopeSpec:
    """How a family turns positions into rotations."""

    head_dim: int  # channels per attention head
    rotary_dim: int  # leading channels of a head that are rotated (head_dim unless partial)
    axes: tuple[int, ...] | None = None  # M-RoPE: per rotary frequency, the position axis driving it; None: 1-D
    pairs: bool = False  # rotate adjacent channel pairs (GLM) instead of the two halves
    variants: tuple[str | None, ...] = (None,)  # frequency tables: None, or config.rope_parameters keys (Gemma-3)
    variant_dims: tuple[int, ...] = ()  # per variant its rotary_dim, where the layer kinds' heads differ (Gemma 4)

    @property
    def position_dims(self) -> int:
        """Positions per token: 1 for RoPE, 3 for M-RoPE."""
        return 1 if self.axes is None else 3


def rope_frequencies(config, rotary_dim: int, variant: str | None = None) -> tuple[torch.Tensor, float]:
    """(inverse frequencies (rotary_dim / 2,), cos/sin scale) as transformers computes them for `config`.

    Args:
        config: the HF (text) config.
        rotary_dim: rotated channels per head.
        variant: a key of `config.rope_parameters` for models with one table per layer type (Gemma-3).
    """
    params = getattr(config, "rope_parameters", None) or {}
    if variant is not None:
        params = params[variant]
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim)), 1.0
    if rope_type == "dynamic":
        raise DossierError("dynamic NTK RoPE scaling is not supported (positions must not change the frequencies)")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise DossierError(f"RoPE type {rope_type!r} is not supported")
    extra = {} if variant is None else {"layer_type": variant}
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", **extra)
    return inv_freq.float(), float(scaling)


def mrope_axes(sections: list[int], half: int, interleaved: bool = False) -> tuple[int, ...]:
    """The position axis of each of the `half` rotary frequencies.

    Contiguous (Qwen2/2.5-VL, GLM-4V): the first sections[0] frequencies follow time, the next
    sections[1] height, the rest width. Interleaved (Qwen3-VL): height drives frequencies
    1, 4, 7, ... below 3 * sections[1], width 2, 5, 8, ... below 3 * sections[2], time the rest.
    """
    if interleaved:
        axes = [0] * half
        for axis in (1, 2):
            for i in range(axis, min(3 * sections[axis], half), 3):
                axes[i] = axis
        return tuple(axes)
    if sum(sections) != half:
        raise DossierError(f"mrope_section {sections} must sum to {half} (half the rotary channels of a head)")
    return tuple(axis for axis, size in enumerate(sections) for _ in range(size))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """GLM's rotation: (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


class Rotary:
    """A model's rotary tables on its device; built by the adapter's `init_buffers`."""

    def __init__(self, spec: RopeSpec, config, device: torch.device) -> None:
        self.spec = spec
        self._turn = rotate_pairs if spec.pairs else rotate_half
        self.tables: dict[str | None, tuple[torch.Tensor, float]] = {}
        dims = spec.variant_dims or (spec.rotary_dim,) * len(spec.variants)
        for variant, rotary_dim in zip(spec.variants, dims, strict=True):
            with torch.device("cpu"):
                inv_freq, scaling = rope_frequencies(config, rotary_dim, variant)
            self.tables[variant] = (inv_freq if device.type == "meta" else inv_freq.to(device), scaling)
        axes = torch.tensor(spec.axes if spec.axes is not None else (), dtype=torch.long)
        self.axes = axes if device.type == "meta" else axes.to(device)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> dict[str | None, tuple[torch.Tensor, torch.Tensor]]:
        """Per variant: (cos, sin), each (tokens, 1, rotary_dim), for positions (tokens,) or (3, tokens)."""
        out = {}
        for variant, (inv_freq, scaling) in self.tables.items():
            if self.spec.axes is None:
                freqs = positions[:, None].float() * inv_freq  # (tokens, rotary_dim / 2)
            else:
                if positions.dim() == 1:  # text-only batch of an M-RoPE model: all three axes equal
                    positions = positions.unsqueeze(0).expand(3, -1)
                freqs = positions.index_select(0, self.axes).float().T * inv_freq  # each frequency follows its axis
            angles = freqs.repeat_interleave(2, dim=-1) if self.spec.pairs else torch.cat((freqs, freqs), dim=-1)
            cos, sin = angles.cos(), angles.sin()
            if scaling != 1.0:
                cos, sin = cos * scaling, sin * scaling
            out[variant] = (cos.to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1))
        return out

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (tokens, heads, head_dim) rotated over its first rotary_dim channels (cos's width)."""
        rot = cos.shape[-1]
        if rot == x.shape[-1]:
            return x * cos + self._turn(x) * sin
        moving, fixed = x[..., :rot], x[..., rot:]
        return torch.cat((moving * cos + self._turn(moving) * sin, fixed), dim=-1)
