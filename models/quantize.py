"""Optional weight-only quantisation of the language model's linear layers.

Only the decoder's linear layers are quantised: the embeddings, the output head and a
vision-language model's vision tower keep the model dtype (image features are the input the
rest depends on; the tower is a small share of the weights). One exception: int8 on the CPU runs
the output head in int8 too (an FBGEMM copy beside the embeddings, which the token lookup keeps
reading): Qwen2.5-1.5B's float32 head is 0.93 GB, 40 % of what a decode step read at int8, and took
36-80 ms of it on a 2-core AVX2 EPYC against int8's 10-20 ms (1-8 rows). Teacher-forced top-1
agreement with float32 on the 8 prompts of benchmarks/quant_quality.py (264 positions): int8 decoder
249/264, with the int8 head 248/264 (SmolLM2-135M: 225 and 223/264; the head alone 242/264 there).

| mode | CPU | CUDA |
|---|---|---|
| int4 | torch's native int4 kernel, groups of 32 (`models/int_linear.py`) | refused: use nf4 |
| int8 | FBGEMM dynamic int8 (int8 weights per channel, activations per step; x86; oneDNN's AMX kernel for steps of 64+ rows where the CPU has AMX), the output head included | bitsandbytes LLM.int8 |
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

__all__ = ["QUANTIZATIONS", "QuantizationCheckError", "linear_parameters", "quantize_linears", "weight_bytes"]

QUANTIZATIONS = ("int4", "int8", "nf4")
# Input features per (scale, zero) pair of --quantization int4. 32 is the block of GGUF's Q4_1 and of Q4_K's
# sub-blocks, so re-quantising a dequantised Q4 model recovers its own codes: SmolLM2 (Q4_1) in int4 with groups of
# 32 agreed with its float32 self on 100% of 200 teacher-forced top-1 positions, with groups of 64 on 76%, of 128 on
# 78% (2-core AVX2 CPU; the kernel is 5-15% slower at 32 than at 128).
INT4_GROUP_SIZE = 32

log = logging.getLogger(__name__)


def _targets(model: nn.Module) -> list[tuple[str, str]]:
    """(parent module name, child name) of every `nn.Linear` quantisation replaces."""
    return [(parent_name, name) for parent_name, parent in model.named_modules()
            for name, child in parent.named_children()
            if isinstance(child, nn.Linear) and not _kept(f"{parent_name}.{name}".lstrip("."))]


def linear_parameters(model: nn.Module) -> int:
    """Weights in the linear layers `quantize_linears` would replace (the language model's, not its head)."""
    total = 0
    for parent_name, name in _targets(model):
        parent = model.get_submodule(parent_name) if parent_name else model
        total += getattr(parent, name).weight.numel()
    return total


class QuantizationCheckError(DossierError):
    """A quantised layer's matmul is not finite or far from its dequantised reference on this machine."""
# Module name prefixes that are never quantised: vision towers and the output head.
_KEEP = ("visual", "vision_tower", "vision_model", "lm_head")


def quantize_linears(model: nn.Module, mode: str, backend: str = "auto", group_size: int = INT4_GROUP_SIZE,
                     device: str | torch.device | None = None) -> int:
    """Replace the language model's `nn.Linear` layers by weight-only quantised ones.

    Args:
        model: the adapter, weights already loaded.
        mode: "int4", "int8" or "nf4" (see the module's table).
        backend: "auto" (the table), "native" (torch's CPU kernels: int4, int8) or "bitsandbytes".
        group_size: int4 only: input features per (scale, zero) pair (32, 64, 128 or 256).
        device: where the quantised model ends (None: where it is). A model loaded on the CPU for a GPU is
            quantised layer by layer on its way there (bitsandbytes), so the GPU never holds the unquantised
            model: its peak is the quantised model plus one layer.
    Returns:
        the number of layers replaced.
    Raises:
        DossierError: an unknown mode, int4 on CUDA, or a quantised layer whose check fails here.
    """
    if mode not in QUANTIZATIONS:
        raise DossierError(f"quantization {mode!r} is not one of {', '.join(QUANTIZATIONS)}")
    if group_size not in (32, 64, 128, 256):
        raise DossierError(f"int4 group size {group_size} is not one of 32, 64, 128, 256")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    if backend == "auto":
        backend = "native" if mode == "int4" or (mode == "int8" and device.type == "cpu") else "bitsandbytes"
    if backend == "native" and (mode == "nf4" or device.type != "cpu"):
        raise DossierError(f"quantization {mode!r} on {device.type}: torch's native kernels here are int4 and int8 on "
                           "the CPU; on a GPU use nf4 or int8 (bitsandbytes)")
    if backend == "native" and mode == "int8" and "fbgemm" not in torch.backends.quantized.supported_engines:
        raise DossierError("quantization 'int8' on this CPU needs FBGEMM (x86); use int4, or no quantisation")
    targets = _targets(model)
    if backend == "native" and mode == "int8":
        return _quantize_int8_dynamic(model, targets)
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
        module = _quantized(bnb, linear, mode).to(device)  # bitsandbytes quantises as the weight reaches the device
        if index == 0:  # one layer proves the kernel on this machine; its reference is the unquantised weight
            _check_layer(module, linear.to(device), f"{parent_name}.{name}", mode)
        setattr(parent, name, module)
        del linear  # the unquantised weight (on the CPU when loading for a GPU) goes as its layer does
    model.to(device)  # what stays unquantised: embeddings, norms, the output head, a vision tower, buffers
    return len(targets)


def _quantize_native(model: nn.Module, targets: list[tuple[str, str]], group_size: int) -> int:
    """int4 for every target the kernel can pack: the group size asked for, else the largest of 64, 32 that divides
    the layer's inputs (e.g. 576 = 9 x 64 with groups of 128 asked for), said once; a layer none divides, or whose outputs are not a multiple
    of 16 (the packing's tile), keeps the model dtype, said once with its name and sizes."""
    from models.int_linear import Int4Linear

    kept: list[str] = []
    smaller: dict[int, int] = {}
    replaced = 0
    for parent_name, name in targets:
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, name)
        qualified = f"{parent_name}.{name}".lstrip(".")
        group = next((g for g in (group_size, 64, 32) if g <= group_size and linear.in_features % g == 0), None)
        if group is None or linear.out_features % 16:
            kept.append(f"{qualified} ({linear.in_features} inputs, {linear.out_features} outputs)")
            continue
        if group != group_size:
            smaller[group] = smaller.get(group, 0) + 1
        module = Int4Linear(linear, group)
        if replaced == 0:
            _check_layer(module, linear, qualified, "int4")
        setattr(parent, name, module)
        replaced += 1
    for group, count in sorted(smaller.items(), reverse=True):
        log.warning("int4: %d linear layer(s) use groups of %d: their inputs are not a multiple of %d", count, group,
                    group_size)
    if kept:
        log.warning("int4 keeps %d linear layer(s) in the model dtype (inputs must be a multiple of 32 and outputs of "
                    "16): %s", len(kept), ", ".join(kept[:4]) + (" ..." if len(kept) > 4 else ""))
    return replaced


def _quantize_int8_dynamic(model: nn.Module, targets: list[tuple[str, str]]) -> int:
    from models.int_linear import Int8DynamicLinear

    for index, (parent_name, name) in enumerate(targets):
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, name)
        module = Int8DynamicLinear(linear)
        if index == 0:
            _check_layer(module, linear, f"{parent_name}.{name}".lstrip("."), "int8")
        setattr(parent, name, module)
    for module in model.modules():  # the output head too (int8_head; the embeddings keep the model dtype)
        if hasattr(module, "output_weight") and not hasattr(module, "int8_head"):
            weight = module.output_weight()
            head = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            head.weight = nn.Parameter(weight.detach(), requires_grad=False)
            module.int8_head = Int8DynamicLinear(head)
            _check_layer(module.int8_head, head, "output head", "int8")
    return len(targets)


def _check_layer(module: nn.Module, linear: nn.Linear, name: str, mode: str) -> None:
    """Refuse a quantised layer whose matmul is not finite, or not close to the unquantised one, here."""
    weight = linear.weight.data
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, weight.shape[1], generator=generator).to(weight.device, weight.dtype)
    with torch.no_grad():
        got = module(x).float()
        want = x.float() @ weight.float().T  # (4, N); the bias is left out of both sides
        if linear.bias is not None:
            got = got - linear.bias.float()
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
    total += sum(getattr(m, "weight_bytes", 0) for m in model.modules())  # FBGEMM's packed weights: no tensors
    for module in model.modules():  # NF4 quantisation constants live beside the packed weight
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            total += sum(t.numel() * t.element_size() for t in _state_tensors(state))
    return total


def _state_tensors(state) -> list[torch.Tensor]:
    tensors = [t for t in (getattr(state, "absmax", None), getattr(state, "code", None)) if isinstance(t, torch.Tensor)]
    nested = getattr(state, "state2", None)
    return tensors + (_state_tensors(nested) if nested is not None else [])
