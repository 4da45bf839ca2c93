"""Optional bitsandbytes weight quantisation (4-bit NF4 or 8-bit) of an adapter's linear layers.

The embeddings and the output head stay in full precision. bitsandbytes is an optional
extra: `pip install 'dossier[quant]'`. It quantises a weight when the module is moved
to its device, which is why the new modules are moved at the end.
"""

import warnings

from torch import nn

from tools.errors import DossierError, missing_dependency

__all__ = ["quantize_linears"]


def quantize_linears(model: nn.Module, mode: str) -> int:
    """Replace every `nn.Linear` of `model` except `lm_head` by its bitsandbytes version.

    Args:
        model: the adapter, weights already loaded.
        mode: "bnb-4bit" (NF4) or "bnb-8bit" (LLM.int8).
    Returns:
        the number of layers replaced.
    """
    if mode not in ("bnb-4bit", "bnb-8bit"):
        raise DossierError(f"quantization {mode!r} is not one of 'bnb-4bit', 'bnb-8bit'")
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise missing_dependency("bitsandbytes", "pip install 'dossier[quant]'  (or: pip install bitsandbytes)") from None
    # bitsandbytes warns on every int8 matmul that fp32 inputs are cast to fp16.
    warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast")
    device = next(model.parameters()).device
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name != "lm_head":
                setattr(parent, name, _quantized(bnb, child, mode).to(device))
                replaced += 1
    return replaced


def _quantized(bnb, linear: nn.Linear, mode: str) -> nn.Module:
    weight = linear.weight.data.cpu()
    has_bias = linear.bias is not None
    if mode == "bnb-4bit":
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
