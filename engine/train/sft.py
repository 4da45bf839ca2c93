"""LoRA fine-tuning of a causal LM on query pairs with peft + trl (SFT), on the CPU or a GPU.

Examples arrive already tokenized the way the engine renders conversations
(`engine.train.tokens`), with the prompt masked out of the loss, so trl's SFTTrainer only
batches, pads and optimises: it never re-renders a chat template. Only the LoRA matrices
train; the base weights stay frozen, and the adapter saved is peft's own format
(`adapter_config.json` + `adapter_model.safetensors`), which `dossier run --adapter` merges
into the weights at load (`models/lora.py`).

peft, trl and datasets are the optional extra `dossier[train]`; a missing one raises an error
naming the exact pip command.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.errors import DossierError, missing_dependency

__all__ = ["LoraSettings", "TrainResult", "train_lora", "require_train_extra", "TRAIN_INSTALL"]

log = logging.getLogger(__name__)

TRAIN_INSTALL = "pip install 'dossier[train]'  (or: pip install peft==0.21.2 trl==1.16.0 datasets==5.2.0)"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def require_train_extra() -> None:
    """Raise a clear error when peft, trl or datasets is missing."""
    import importlib.util

    missing = [name for name in ("peft", "trl", "datasets") if importlib.util.find_spec(name) is None]
    if missing:
        raise missing_dependency(f"training ({', '.join(missing)})", TRAIN_INSTALL)


@dataclass(slots=True)
class LoraSettings:
    rank: int = 16  # LoRA rank r: columns of each low-rank update
    alpha: float = 32.0  # LoRA scale numerator: updates are scaled by alpha / rank
    dropout: float = 0.05  # dropout on the LoRA input during training
    targets: tuple[str, ...] = LORA_TARGETS  # linear layers that get an adapter (HF module names)
    top_layers: int | None = None  # adapt only the top N transformer layers (backward stops below them); None: all
    learning_rate: float = 2e-4  # AdamW peak learning rate (linear decay)
    epochs: float = 3.0  # passes over the training pairs
    max_steps: int = -1  # optimiser steps; -1 lets `epochs` decide
    batch_size: int = 4  # pairs per forward pass
    grad_accum: int = 2  # forward passes per optimiser step
    warmup_ratio: float = 0.05  # share of steps spent warming the learning rate up
    weight_decay: float = 0.0  # AdamW weight decay on the LoRA matrices
    max_tokens: int = 2048  # longest example (prompt + target) in tokens; longer pairs are left out
    bf16: bool = False  # bf16 autocast (a GPU, or a CPU with avx512_bf16); fp32 otherwise
    seed: int = 0  # data order and LoRA initialisation
    device: str = "auto"  # "cpu", "cuda" or "auto"

    def __post_init__(self):
        if self.rank < 1:
            raise DossierError(f"LoRA rank must be at least 1 (got {self.rank})")
        if self.alpha <= 0:
            raise DossierError(f"LoRA alpha must be positive (got {self.alpha})")
        if not 0 <= self.dropout < 1:
            raise DossierError(f"LoRA dropout must be in [0, 1) (got {self.dropout})")
        if self.learning_rate <= 0:
            raise DossierError(f"learning rate must be positive (got {self.learning_rate})")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise DossierError("give a positive --epochs or --max-steps")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise DossierError(f"batch size and gradient accumulation must be at least 1 "
                               f"(got {self.batch_size}, {self.grad_accum})")
        if self.device not in ("auto", "cpu", "cuda"):
            raise DossierError(f"device must be cpu, cuda or auto (got {self.device!r})")
        if not self.targets:
            raise DossierError("LoRA needs at least one target module")
        if self.top_layers is not None and self.top_layers < 1:
            raise DossierError(f"--top-layers must be at least 1 (got {self.top_layers})")

    def to_json(self) -> dict:
        return {**asdict(self), "targets": list(self.targets)}


@dataclass(slots=True)
class TrainResult:
    steps: int  # optimiser steps taken
    train_losses: list[dict]  # {"step", "loss", "learning_rate"} as logged every step
    eval_losses: list[dict]  # {"step", "eval_loss"} on the held-out pairs, per epoch
    initial_eval_loss: float | None  # held-out loss before the first step
    seconds: float  # wall time of training (model loading excluded)
    peak_rss_mib: float  # the process's peak resident memory, MiB
    trainable_parameters: int
    total_parameters: int
    device: str

    def to_json(self) -> dict:
        return asdict(self)


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise DossierError("--device cuda was given but no CUDA device is available; use --device cpu")
    return name


def train_lora(model_dir: Path, train_examples: list[dict], eval_examples: list[dict], settings: LoraSettings,
               out: Path, progress: Callable[[int, int, dict], None] | None = None) -> TrainResult:
    """Train a LoRA adapter and save it (peft format) in `out`.

    Args:
        model_dir: a Hugging Face model folder (the converted default model, or any local one).
        train_examples: {"input_ids", "labels"} dicts (prompt labels -100), see `encode_pair`.
        eval_examples: the same for held-out pairs (may be empty).
        settings: LoRA and optimiser settings.
        out: the adapter directory.
        progress: called as progress(step, total_steps, logs) after every optimiser step.
    """
    require_train_extra()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    if not train_examples:
        raise DossierError("no training pairs: nothing to train on (see the skipped reasons above)")
    device = _device(settings.device)
    torch.manual_seed(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in settings.targets if t in present]
    if not targets:
        raise DossierError(f"none of the LoRA targets {list(settings.targets)} is a module of {model_dir}; "
                           f"its linear layers include {sorted(present)[:12]}")
    layers = model.config.num_hidden_layers
    if settings.top_layers is not None and settings.top_layers > layers:
        raise DossierError(f"--top-layers {settings.top_layers} exceeds the {layers} layers of {model_dir}")
    chosen = list(range(layers - settings.top_layers, layers)) if settings.top_layers else None
    model = get_peft_model(model, LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                                             target_modules=targets, layers_to_transform=chosen, task_type="CAUSAL_LM",
                                             bias="none"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    columns = ("input_ids", "labels")
    train_set = Dataset.from_list([{c: e[c] for c in columns} for e in train_examples])
    eval_set = Dataset.from_list([{c: e[c] for c in columns} for e in eval_examples]) if eval_examples else None
    scratch = out / ".trainer"
    args = SFTConfig(
        output_dir=str(scratch), per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size, gradient_accumulation_steps=settings.grad_accum,
        num_train_epochs=settings.epochs, max_steps=settings.max_steps, learning_rate=settings.learning_rate,
        lr_scheduler_type="linear", warmup_steps=settings.warmup_ratio, weight_decay=settings.weight_decay,
        logging_steps=1, save_strategy="no", eval_strategy="epoch" if eval_set is not None else "no",
        report_to=[], seed=settings.seed, data_seed=settings.seed, max_length=None, bf16=settings.bf16,
        use_cpu=device == "cpu", disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False,
        completion_only_loss=None, dataset_num_proc=None,
    )
    if tokenizer.pad_token is None:  # padding is masked by the attention mask and -100 labels, so any token does
        tokenizer.pad_token = tokenizer.eos_token

    train_losses: list[dict] = []
    eval_losses: list[dict] = []

    class _Record(TrainerCallback):
        def on_log(self, _args, state, _control, logs=None, **_kw):
            logs = logs or {}
            if "loss" in logs:
                train_losses.append({"step": state.global_step, "loss": float(logs["loss"]),
                                     "learning_rate": float(logs.get("learning_rate", 0.0))})
            if "eval_loss" in logs:
                eval_losses.append({"step": state.global_step, "eval_loss": float(logs["eval_loss"])})
            if progress and "loss" in logs:
                progress(state.global_step, state.max_steps, logs)

    trainer = SFTTrainer(model=model, args=args, train_dataset=train_set, eval_dataset=eval_set,
                         processing_class=tokenizer, callbacks=[_Record()])
    trainer.remove_callback(PrinterCallback)  # it prints every log dict on stdout; progress goes through `progress`
    initial = float(trainer.evaluate()["eval_loss"]) if eval_set is not None else None
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _remove_tree(scratch)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return TrainResult(trainer.state.global_step, train_losses, eval_losses, initial, seconds, round(peak, 1),
                       trainable, total, device)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
