"""Checkpoint tensors into a decoder adapter, and back under transformers' names, by a family's name map.

Every family's LM is the same `DecoderLayer` under our names (`layers.3.qkv_proj.weight`,
`layers.3.mlp_norm.weight`); a family's `WeightNames` says where its checkpoint keeps them:
- the prefixes of the LM, vision tower and output head (text models: `model.*` and
  `lm_head.*`; vision-language checkpoints use `model.layers.*` / `visual.*` when published,
  `model.language_model.*` / `model.visual.*` under transformers 5 — both are read);
- which HF norm each of our four layer norms is (Gemma-3's `post_attention_layernorm` is the
  norm on the attention output; Llama's is the norm before the MLP);
- whether gate and up come fused (GLM-4V).
q/k/v and gate/up are concatenated on load into our fused projections and split again by
`hf_state_dict`, which builds the HF reference model from our weights.
"""

from dataclasses import dataclass

import torch

from tools.errors import DossierError

__all__ = ["TEXT_PREFIXES", "TEXT_WEIGHTS", "VL_PREFIXES", "WeightNames", "hf_state_dict", "load_weights",
           "split_checkpoint"]

TEXT_PREFIXES = (("model.", "text"), ("lm_head.", "lm_head"))
VL_PREFIXES = (("model.visual.", "visual"), ("visual.", "visual"), ("model.language_model.", "text"),
               ("language_model.model.", "text"), ("model.", "text"), ("lm_head.", "lm_head"))


@dataclass(frozen=True, slots=True)
class WeightNames:
    """Where a family's checkpoint keeps the tensors of our decoder (and tower)."""

    norms: tuple[tuple[str, str], ...]  # (our layer norm, the HF name of that norm in a layer)
    # (checkpoint prefix, "text" | "visual" | "lm_head" | "skip"), first match wins; "visual:<p>" puts <p> first
    prefixes: tuple[tuple[str, str], ...] = TEXT_PREFIXES
    save_prefix: str = "model."  # prefix of the LM's tensors in transformers 5 names ("model.language_model." for VL)
    tower_save_prefix: str = "model.visual."  # and of the vision tower's ("model." for Gemma-3's two-part tower)
    fused_gate_up: bool = False  # the checkpoint stores mlp.gate_up_proj (GLM-4V) rather than gate_proj + up_proj


# Llama's layout, shared by most text models: a norm before attention and one before the MLP.
TEXT_WEIGHTS = WeightNames(norms=(("attn_norm", "input_layernorm"), ("mlp_norm", "post_attention_layernorm")))


def split_checkpoint(names: WeightNames, tensors: dict[str, torch.Tensor]) -> tuple[dict, dict, torch.Tensor | None]:
    """(vision tower tensors, LM tensors, lm_head weight or None) with the prefixes removed."""
    visual, text, head = {}, {}, None
    for name, tensor in tensors.items():
        for prefix, part in names.prefixes:
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                if ":" in part:  # "visual:vision_tower.": the module's own prefix for these names (Gemma-3's tower)
                    part, own = part.split(":", 1)
                    rest = own + rest
                if part == "visual":
                    visual[rest] = tensor
                elif part == "text":
                    text[rest] = tensor
                elif part == "lm_head" and rest == "weight":
                    head = tensor
                break  # "skip": tensors the family does not use (Qwen3.5's multi-token-prediction head, say)
    return visual, text, head


def _layer_sources(adapter, i: int) -> list[tuple[str, list[str]]]:
    """(our parameter, HF tensors concatenated into it) for layer i."""
    layer, names, p = adapter.layers[i], adapter.family.weights, f"layers.{i}."
    if hasattr(layer, "hf_sources"):  # a layer of another kind names its own tensors (models/linear_attention.py)
        out = layer.hf_sources(p)
        return out + _mlp_and_norm_sources(layer, names, p)
    attn = [p + f"self_attn.{n}_proj" for n in "qkv"]
    out = [(p + "qkv_proj.weight", [n + ".weight" for n in attn]), (p + "o_proj.weight", [p + "self_attn.o_proj.weight"])]
    if layer.qkv_proj.bias is not None:
        out.append((p + "qkv_proj.bias", [n + ".bias" for n in attn]))
    if layer.o_proj.bias is not None:
        out.append((p + "o_proj.bias", [p + "self_attn.o_proj.bias"]))
    if layer.q_norm is not None:
        out += [(p + "q_norm.weight", [p + "self_attn.q_norm.weight"]), (p + "k_norm.weight", [p + "self_attn.k_norm.weight"])]
    return out + _mlp_and_norm_sources(layer, names, p)


def _mlp_and_norm_sources(layer, names: WeightNames, p: str) -> list[tuple[str, list[str]]]:
    out = []
    mlp = ["gate_up"] if names.fused_gate_up else ["gate", "up"]
    out.append((p + "gate_up_proj.weight", [p + f"mlp.{n}_proj.weight" for n in mlp]))
    out.append((p + "down_proj.weight", [p + "mlp.down_proj.weight"]))
    if layer.gate_up_proj.bias is not None:
        out.append((p + "gate_up_proj.bias", [p + f"mlp.{n}_proj.bias" for n in mlp]))
        out.append((p + "down_proj.bias", [p + "mlp.down_proj.bias"]))
    out += [(p + f"{ours}.weight", [p + f"{theirs}.weight"]) for ours, theirs in names.norms
            if getattr(layer, ours) is not None]
    return out


def _sources(adapter) -> list[tuple[str, list[str]]]:
    out = [("embed_tokens.weight", ["embed_tokens.weight"]), ("norm.weight", ["norm.weight"])]
    if hasattr(adapter, "hf_sources"):  # tensors of the model's own beyond these (Gemma 4's per-layer embeddings)
        out += adapter.hf_sources()
    for i in range(len(adapter.layers)):
        out += _layer_sources(adapter, i)
    return out


@torch.no_grad()
def load_weights(adapter, tensors: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's tensors (any naming scheme the family lists) into `adapter`."""
    visual, text, head = split_checkpoint(adapter.family.weights, tensors)
    model_type = adapter.config.model_type
    if not text:
        raise DossierError(f"{adapter.name}: the checkpoint has no language-model tensors; is it a {model_type} model?")
    ours = dict(adapter.named_parameters())
    for target, names in _sources(adapter):
        missing = [n for n in names if n not in text]
        if missing:
            raise DossierError(f"{adapter.name}: checkpoint has no tensor {missing[0]!r}; is it a {model_type} model?")
        ours[target].copy_(torch.cat([text[n] for n in names]) if len(names) > 1 else text[names[0]])
    if adapter.lm_head is not None:
        adapter.lm_head.weight.copy_(head if head is not None else text["embed_tokens.weight"])
    tower = getattr(adapter, "visual", None)
    if tower is None:
        return
    expected = set(tower.state_dict())
    missing = sorted(expected - set(visual))
    if missing:
        raise DossierError(f"{adapter.name}: checkpoint lacks {len(missing)} vision tower tensors, e.g. 'visual.{missing[0]}'")
    tower.load_state_dict({k: v for k, v in visual.items() if k in expected}, strict=True)


def hf_state_dict(adapter) -> dict[str, torch.Tensor]:
    """The weights under transformers 5 names (e.g. `model.layers.*`, `model.visual.*`, `lm_head.weight`)."""
    ours = dict(adapter.named_parameters())
    prefix = adapter.family.weights.save_prefix
    out: dict[str, torch.Tensor] = {}
    for target, names in _sources(adapter):
        parts = ours[target].split([_rows(adapter, n) for n in names]) if len(names) > 1 else [ours[target]]
        for name, part in zip(names, parts):
            out[prefix + name] = part
    tower = getattr(adapter, "visual", None)
    if tower is not None:
        for name, tensor in tower.state_dict().items():
            out[adapter.family.weights.tower_save_prefix + name] = tensor
    if adapter.lm_head is not None:  # tied: the HF model's lm_head is its embedding (safetensors refuses a second name)
        out["lm_head.weight"] = adapter.lm_head.weight
    return out


def _rows(adapter, hf_name: str) -> int:
    """Output rows of one of the HF projections fused into ours."""
    spec = adapter.spec.layer
    layer = adapter.layers[int(hf_name.split("layers.", 1)[1].split(".", 1)[0])]
    rows = layer.hf_rows(hf_name) if hasattr(layer, "hf_rows") else None
    if rows is not None:
        return rows
    if ".q_proj." in hf_name:
        return spec.heads * spec.head_dim * (2 if spec.attn_output_gate else 1)
    if ".k_proj." in hf_name or ".v_proj." in hf_name:
        return spec.kv_heads * spec.head_dim
    return spec.intermediate  # gate_proj / up_proj
