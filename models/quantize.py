"""Optional bitsandbytes weight quantisation of the language model: 4-bit NF4 or 8-bit LLM.int8.

Only the decoder's linear layers are quantised: the embeddings, the output head and a
vision-language model's vision tower keep the model dtype (image features are the input the
rest depends on; the tower is a small share of the weights). bitsandbytes is an optional extra
(`pip install 'dossier[quant]'`); 0.50 runs on the CPU too, which is how the tests check the
quality loss (top-1 agreement with the unquantised model) and the memory saved.
bitsandbytes quantises a weight when its module is moved to the device, so new modules are moved
as they are made.
"""

import warnings

import torch
from torch import nn

from tools.errors import DossierError, missing_dependency

__all__ = ["QUANTIZATIONS", "quantize_linears", "weight_bytes"]

QUANTIZATIONS = ("nf4", "int8")
# Module name prefixes that are never quantised: vision towers and the output head.
_KEEP = ("visual", "vision_tower", "vision_model", "lm_head")


def quantize_linears(model: nn.Module, mode: str) -> int:
    """Replace the language model's `nn.Linear` layers by their bitsandbytes versions.

    Args:
        model: the adapter, weights already loaded.
        mode: "nf4" (4-bit NormalFloat, bitsandbytes Linear4bit) or "int8" (LLM.int8, Linear8bitLt).
    Returns:
        the number of layers replaced.
    """
    if mode not in QUANTIZATIONS:
        raise DossierError(f"quantization {mode!r} is not one of {', '.join(QUANTIZATIONS)}")
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise missing_dependency("bitsandbytes", "pip install 'dossier[quant]'  (or: pip install bitsandbytes)") from None
    # bitsandbytes warns on every int8 matmul that fp32 inputs are cast to fp16.
    warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast")
    device = next(model.parameters()).device
    targets = [(parent_name, name) for parent_name, parent in model.named_modules()
               for name, child in parent.named_children()
               if isinstance(child, nn.Linear) and not _kept(f"{parent_name}.{name}".lstrip("."))]
    for parent_name, name in targets:
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, name, _quantized(bnb, getattr(parent, name), mode).to(device))
    return len(targets)


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
