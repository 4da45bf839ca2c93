"""Optional weight-only quantisation of the language model's linear layers.

Only the decoder's linear layers are quantised: the embeddings, the output head and a
vision-language model's vision tower keep the model dtype (image features are the input the
rest depends on; the tower is a small share of the weights).

| mode | CPU | CUDA |
|---|---|---|
| int4 | torch's native int4 kernel, groups of 128 (`models/int_linear.py`) | refused: use nf4 |
| int8 | bitsandbytes LLM.int8 | bitsandbytes LLM.int8 |
| nf4  | bitsandbytes NF4 (checked at load: NaN on some CPUs) | bitsandbytes NF4 |

bitsandbytes is an optional extra (`pip install 'dossier[quant]'`); it quantises a weight when its
module is moved to the device, so new modules are moved as they are made. bitsandbytes 0.50.2's
NF4 returns NaN on CPUs with avx512_bf16 (measured: transformers' own bitsandbytes model too), so
every quantised layer is checked once at load with a small matmul against its dequantised
reference, and a non-finite or wrong result is refused with a message instead of silently
producing garbage.
"""

import logging
import warnings

import torch
from torch import nn

from tools.errors import DossierError, missing_dependency

__all__ = ["QUANTIZATIONS", "QuantizationCheckError", "quantize_linears", "weight_bytes"]

QUANTIZATIONS = ("int4", "int8", "nf4")
INT4_GROUP_SIZE = 128  # input features per (scale, zero) pair of --quantization int4

log = logging.getLogger(__name__)


class QuantizationCheckError(DossierError):
    """A quantised layer's matmul is not finite or far from its dequantised reference on this machine."""
# Module name prefixes that are never quantised: vision towers and the output head.
_KEEP = ("visual", "vision_tower", "vision_model", "lm_head")


def quantize_linears(model: nn.Module, mode: str, backend: str = "auto", group_size: int = INT4_GROUP_SIZE) -> int:
    """Replace the language model's `nn.Linear` layers by weight-only quantised ones.

    Args:
        model: the adapter, weights already loaded.
        mode: "int4", "int8" or "nf4" (see the module's table).
        backend: "auto" (the table: native for int4, bitsandbytes otherwise), "native" or "bitsandbytes".
        group_size: int4 only: input features per (scale, zero) pair (32, 64, 128 or 256).
    Returns:
        the number of layers replaced.
    Raises:
        DossierError: an unknown mode, int4 on CUDA, or a quantised layer whose check fails here.
    """
    if mode not in QUANTIZATIONS:
        raise DossierError(f"quantization {mode!r} is not one of {', '.join(QUANTIZATIONS)}")
    if group_size not in (32, 64, 128, 256):
        raise DossierError(f"int4 group size {group_size} is not one of 32, 64, 128, 256")
    device = next(model.parameters()).device
    if backend == "auto":
        backend = "native" if mode == "int4" else "bitsandbytes"
    if backend == "native" and (mode != "int4" or device.type != "cpu"):
        raise DossierError(f"quantization {mode!r} on {device.type}: torch's native kernel here is int4 on the CPU; "
                           "on a GPU use nf4 or int8 (bitsandbytes)")
    targets = [(parent_name, name) for parent_name, parent in model.named_modules()
               for name, child in parent.named_children()
               if isinstance(child, nn.Linear) and not _kept(f"{parent_name}.{name}".lstrip("."))]
    if backend == "native":
        return _quantize_native(model, targets, group_size)
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise missing_dependency("bitsandbytes", "pip install 'dossier[quant]'  (or: pip install bitsandbytes)") from None
    # bitsandbytes warns on every int8 matmul that fp32 inputs are cast to fp16.
    warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast")
    for index, (parent_name, name) in enumerate(targets):
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, name)
        module = _quantized(bnb, linear, mode).to(device)
        if index == 0:  # one layer proves the kernel on this machine; its reference is the unquantised weight
            _check_layer(module, linear.weight.data, f"{parent_name}.{name}", mode)
        setattr(parent, name, module)
    return len(targets)


def _quantize_native(model: nn.Module, targets: list[tuple[str, str]], group_size: int) -> int:
    from models.int_linear import Int4Linear

    kept: list[str] = []
    replaced = 0
    for parent_name, name in targets:
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, name)
        qualified = f"{parent_name}.{name}".lstrip(".")
        if linear.in_features % group_size or linear.out_features % 16:  # the kernel's packing needs both
            kept.append(f"{qualified} ({linear.in_features} inputs, {linear.out_features} outputs)")
            continue
        module = Int4Linear(linear, group_size)
        if replaced == 0:
            _check_layer(module, linear.weight.data, qualified, "int4")
        setattr(parent, name, module)
        replaced += 1
    if kept:
        log.warning("int4 keeps %d linear layer(s) in the model dtype (inputs must be a multiple of the group size %d "
                    "and outputs of 16): %s", len(kept), group_size, ", ".join(kept[:4]) + (" ..." if len(kept) > 4 else ""))
    return replaced


def _check_layer(module: nn.Module, weight: torch.Tensor, name: str, mode: str) -> None:
    """Refuse a quantised layer whose matmul is not finite, or not close to the unquantised one, here."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, weight.shape[1], generator=generator).to(weight.device, weight.dtype)
    with torch.no_grad():
        got = module(x).float()
        want = (x.float() @ weight.float().T)
    if not torch.isfinite(got).all():
        raise QuantizationCheckError(
            f"quantization {mode!r} gives non-finite results on this machine (layer {name!r}: NaN/inf in a 4-row "
            "test matmul); bitsandbytes' NF4 does this on CPUs with avx512_bf16. Use --quantization int4 (torch's "
            "native kernel) on a CPU, or no quantisation")
    cosine = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    if cosine < 0.9:
        raise QuantizationCheckError(
            f"quantization {mode!r} is far from the unquantised layer on this machine (layer {name!r}: cosine "
            f"{cosine:.3f} in a test matmul); use another --quantization or none")


def _kept(qualified: str) -> bool:
    return any(qualified == p or qualified.startswith(p + ".") for p in _KEEP)


def _quantized(bnb, linear: nn.Linear, mode: str) -> nn.Module:
    weight = linear.weight.data.cpu()
    has_bias = linear.bias is not None
    if mode == "nf4":
        module = bnb.nn.Linear4bit(
            linear.in_features, linear.out_features, bias=has_bias, compute_dtype=weight.dtype, quant_type="nf4"
        )
        module.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
    else:
        module = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=has_bias, has_fp16_weights=False)
        module.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
    if has_bias:
        module.bias = nn.Parameter(linear.bias.data.cpu(), requires_grad=False)
    return module


def weight_bytes(model: nn.Module) -> int:
    """Bytes held by the model's parameters and buffers as stored (packed 4-bit weights count as packed)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.data_ptr() in seen or tensor.device.type == "meta":
            continue
        seen.add(tensor.data_ptr())
        total += tensor.numel() * tensor.element_size()
    for module in model.modules():  # NF4 quantisation constants live beside the packed weight
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            total += sum(t.numel() * t.element_size() for t in _state_tensors(state))
    return total


def _state_tensors(state) -> list[torch.Tensor]:
    tensors = [t for t in (getattr(state, "absmax", None), getattr(state, "code", None)) if isinstance(t, torch.Tensor)]
    nested = getattr(state, "state2", None)
    return tensors + (_state_tensors(nested) if nested is not None else [])
