"""Checkpoint tensors of the vision-language families into our adapter, and back under HF names.

Two naming schemes exist: the published checkpoints of Qwen2-VL and Qwen2.5-VL use
`model.layers.*` / `visual.*`, while transformers 5 models (and Qwen3-VL, GLM-4.1V
checkpoints) use `model.language_model.*` / `model.visual.*`. Both are read. The LM's
q/k/v and gate/up projections are fused on load (GLM-4V ships gate/up fused already).
"""

import torch

from tools.errors import DossierError

__all__ = ["hf_state_dict", "load_weights", "split_checkpoint"]

_PREFIXES = (("model.visual.", "visual"), ("visual.", "visual"), ("model.language_model.", "text"),
             ("language_model.model.", "text"), ("model.", "text"), ("lm_head.", "lm_head"))


def split_checkpoint(tensors: dict[str, torch.Tensor]) -> tuple[dict, dict, torch.Tensor | None]:
    """(vision tower tensors, LM tensors, lm_head weight or None) with the prefixes removed."""
    visual, text, head = {}, {}, None
    for name, tensor in tensors.items():
        for prefix, part in _PREFIXES:
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                if part == "visual":
                    visual[rest] = tensor
                elif part == "text":
                    text[rest] = tensor
                elif rest == "weight":
                    head = tensor
                break
    return visual, text, head


def _layer_sources(adapter, i: int) -> list[tuple[str, list[str]]]:
    """(our parameter, HF tensors concatenated into it) for layer i."""
    spec, p = adapter.spec, f"layers.{i}."
    attn = [p + f"self_attn.{n}_proj" for n in "qkv"]
    out = [(p + "qkv_proj.weight", [n + ".weight" for n in attn]), (p + "o_proj.weight", [p + "self_attn.o_proj.weight"])]
    if spec.qkv_bias:
        out.append((p + "qkv_proj.bias", [n + ".bias" for n in attn]))
    if spec.o_bias:
        out.append((p + "o_proj.bias", [p + "self_attn.o_proj.bias"]))
    if spec.qk_norm:
        out += [(p + "q_norm.weight", [p + "self_attn.q_norm.weight"]), (p + "k_norm.weight", [p + "self_attn.k_norm.weight"])]
    if adapter.fused_gate_up:
        out.append((p + "gate_up_proj.weight", [p + "mlp.gate_up_proj.weight"]))
    else:
        out.append((p + "gate_up_proj.weight", [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]))
    out.append((p + "down_proj.weight", [p + "mlp.down_proj.weight"]))
    norms = ["input_layernorm", "post_attention_layernorm"]
    if spec.sandwich_norms:
        norms += ["post_self_attn_layernorm", "post_mlp_layernorm"]
    out += [(p + f"{n}.weight", [p + f"{n}.weight"]) for n in norms]
    return out


def _sources(adapter) -> list[tuple[str, list[str]]]:
    out = [("embed_tokens.weight", ["embed_tokens.weight"]), ("norm.weight", ["norm.weight"])]
    for i in range(len(adapter.layers)):
        out += _layer_sources(adapter, i)
    return out


@torch.no_grad()
def load_weights(adapter, tensors: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's tensors (either naming scheme) into `adapter`."""
    visual, text, head = split_checkpoint(tensors)
    if not text:
        raise DossierError(f"{adapter.name}: the checkpoint has no language-model tensors (model.layers.* or "
                           "model.language_model.*); is it a vision-language model?")
    ours = dict(adapter.named_parameters())
    for target, names in _sources(adapter):
        missing = [n for n in names if n not in text]
        if missing:
            raise DossierError(f"{adapter.name}: checkpoint has no tensor {missing[0]!r}; "
                               f"is it a {adapter.config.model_type} model?")
        ours[target].copy_(torch.cat([text[n] for n in names]) if len(names) > 1 else text[names[0]])
    if adapter.lm_head is not None:
        adapter.lm_head.weight.copy_(head if head is not None else text["embed_tokens.weight"])
    expected = set(adapter.visual.state_dict())
    missing = sorted(expected - set(visual))
    if missing:
        raise DossierError(f"{adapter.name}: checkpoint lacks {len(missing)} vision tower tensors, e.g. 'visual.{missing[0]}'")
    adapter.visual.load_state_dict({k: v for k, v in visual.items() if k in expected}, strict=True)


def hf_state_dict(adapter) -> dict[str, torch.Tensor]:
    """The weights under transformers 5 names (`model.language_model.*`, `model.visual.*`, `lm_head.weight`)."""
    ours = dict(adapter.named_parameters())
    out: dict[str, torch.Tensor] = {}
    for target, names in _sources(adapter):
        parts = ours[target].split([_rows(adapter, n) for n in names]) if len(names) > 1 else [ours[target]]
        for name, part in zip(names, parts):
            out["model.language_model." + name] = part
    for name, tensor in adapter.visual.state_dict().items():
        out["model.visual." + name] = tensor
    out["lm_head.weight"] = adapter.embed_tokens.weight if adapter.lm_head is None else adapter.lm_head.weight
    return out


def _rows(adapter, hf_name: str) -> int:
    """Output rows of one of the HF projections fused into ours."""
    text, spec = adapter.text_config, adapter.spec
    if ".q_proj." in hf_name:
        return text.num_attention_heads * spec.head_dim
    if ".k_proj." in hf_name or ".v_proj." in hf_name:
        return text.num_key_value_heads * spec.head_dim
    return text.intermediate_size  # gate_proj / up_proj
