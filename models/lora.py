"""LoRA adapters merged into a checkpoint's weights at load, so the engine runs them at full speed.

An adapter directory is peft's own format: `adapter_config.json` (rank, alpha, target
modules) and `adapter_model.safetensors` with `...<module>.lora_A.weight` (rank × in) and
`...<module>.lora_B.weight` (out × rank) under the base model's Hugging Face names. Merging
adds `scale · B @ A` to each target weight before the family copies the tensors into place,
where scale = alpha / rank (alpha / sqrt(rank) with rsLoRA) — peft's `merge_and_unload`
arithmetic, so logits equal peft's own forward up to float rounding.

Only what can be merged exactly is accepted: DoRA, LoRA on embeddings, LoRA biases and
`modules_to_save` raise an error naming the setting.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from tools.errors import DossierError

__all__ = ["merge_lora", "read_lora"]

_PREFIX = "base_model.model."


def read_lora(adapter_dir: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(adapter_config.json, tensors) of a peft LoRA adapter directory; checks what merging supports."""
    folder = Path(adapter_dir).expanduser()
    config_path, weights_path = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise DossierError(f"adapter {str(folder)!r} needs adapter_config.json and adapter_model.safetensors "
                           "(a directory written by `dossier train queries` or peft's save_pretrained)")
    config = json.loads(config_path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise DossierError(f"adapter {str(folder)!r} is a {config.get('peft_type')} adapter; only LoRA can be merged")
    for key, why in (("use_dora", "DoRA"), ("modules_to_save", "modules_to_save"), ("lora_bias", "LoRA biases")):
        if config.get(key):
            raise DossierError(f"adapter {str(folder)!r} uses {why}, which merging at load does not support")
    if config.get("bias", "none") != "none":
        raise DossierError(f"adapter {str(folder)!r} trains biases (bias={config['bias']!r}); only bias='none' merges")
    from safetensors.torch import load_file

    return config, load_file(weights_path)


def _scale(config: dict, module: str, rank: int) -> float:
    """alpha / rank for a module, honouring peft's per-module rank/alpha patterns and rsLoRA."""
    alpha = config.get("lora_alpha", rank)
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.search(rf"(^|\.){pattern}$", module):
            alpha = value
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def merge_lora(tensors: dict[str, torch.Tensor], adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """The checkpoint tensors (Hugging Face names) with the adapter's updates added to its target weights.

    Raises:
        DossierError: the adapter is not mergeable, or names a weight the checkpoint lacks or
            has another shape (an adapter trained for a different model).
    """
    config, lora = read_lora(adapter_dir)
    if any(".lora_embedding_" in key for key in lora):
        raise DossierError(f"adapter {str(adapter_dir)!r} has LoRA on embeddings, which merging does not support")
    merged = dict(tensors)
    pairs = 0
    for key_a in sorted(k for k in lora if k.endswith(".lora_A.weight")):
        module = key_a[: -len(".lora_A.weight")]
        key_b = module + ".lora_B.weight"
        if key_b not in lora:
            raise DossierError(f"adapter {str(adapter_dir)!r} has {key_a} without its lora_B")
        name = (module[len(_PREFIX):] if module.startswith(_PREFIX) else module) + ".weight"
        if name not in merged:
            raise DossierError(f"adapter {str(adapter_dir)!r} changes {name!r}, which this model does not have; "
                               "was it trained for another model?")
        weight = merged[name]
        a, b = lora[key_a].to(torch.float32), lora[key_b].to(torch.float32)  # (rank, in), (out, rank)
        delta = (b @ a) * _scale(config, module, a.shape[0])  # (out, in)
        if config.get("fan_in_fan_out"):
            delta = delta.T
        if delta.shape != weight.shape:
            raise DossierError(f"adapter {str(adapter_dir)!r} changes {name!r} with shape {tuple(delta.shape)}, but the "
                               f"model's weight is {tuple(weight.shape)}; was it trained for another model?")
        merged[name] = (weight.to(torch.float32) + delta).to(weight.dtype)
        pairs += 1
    if pairs == 0:
        raise DossierError(f"adapter {str(adapter_dir)!r} holds no LoRA weights")
    return merged
