"""Engine configuration: one slotted dataclass, checked when built.

Every field says what it means and its unit. `EngineConfig()` gives CPU-friendly
defaults; on a GPU raise `kv_cache_gib` and `max_num_batched_tokens`.
"""

from dataclasses import dataclass

from tools.errors import DossierError

__all__ = ["EngineConfig", "QUANTIZATIONS"]

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICES = ("auto", "cpu", "cuda")
_BACKENDS = ("auto", "triton", "flash_attn", "sdpa", "numba")
QUANTIZATIONS = ("int4", "int8", "nf4")  # as models.quantize.QUANTIZATIONS (config must not import torch)


@dataclass(slots=True)
class EngineConfig:
    # Tokens per KV-cache block; the unit of allocation and of prefix sharing.
    # flash-attn's paged kernels need a multiple of 256 (the triton backend takes any size).
    block_size: int = 16
    # Memory for the KV-cache pool, in GiB; the number of blocks is derived from it and the model shape.
    # None: on a GPU, `gpu_memory_utilization` of the card less what is in use after a warm-up forward; on a
    # CPU, engine/core/kv_budget.py's CPU_KV_CACHE_GIB. Ignored when `num_kv_blocks` is set.
    kv_cache_gib: float | None = None
    # Share of the GPU's memory the engine may use (weights, activations, CUDA graphs, KV pool), 0-1; sizes the
    # pool when `kv_cache_gib` is None.
    gpu_memory_utilization: float = 0.90
    # Longest conversation (prompt plus reply) the engine must hold, tokens; a pool too small for one such request
    # is refused at start. None: the model's context or the pool, the smaller.
    max_model_len: int | None = None
    # Exact size of the KV pool, in blocks (overrides `kv_cache_gib`); tests use
    # a small pool to force eviction and preemption.
    num_kv_blocks: int | None = None
    # Most tokens one forward step may process (prefill chunks + decode tokens).
    max_num_batched_tokens: int = 2048
    # Most sequences in one forward step.
    max_num_seqs: int = 128
    # Most draft tokens a greedy decoding request puts in a step beside its last token, guessed from its own history
    # (the tokens that followed the latest earlier occurrence of its last 3-8 tokens) and kept only while the model
    # chooses them too: an agent's repeated tool calls take a step for several tokens. They take only the step's
    # token budget and free blocks left after the real tokens. 0: off. In the deterministic mode the reply is bit
    # for bit the one without drafts. Not for hybrid linear-attention, sliding-window or sampled-rows-only models
    # (Engine.speculation_blocker), and off on a GPU until measured there. See engine/core/speculation.py.
    speculative_tokens: int = 8
    # A step with prompt tokens to compute runs prompts only (replies in progress wait that step) instead of
    # packing them beside every decoding reply: a new request's first token comes sooner (time to first token),
    # at a cost in throughput where decode rows ride a prefill step nearly free. Off by default (an agent waits
    # for whole replies); see docs/benchmarks.md ("Prompts first").
    prefill_first: bool = False
    # Reuse full KV blocks whose (parent hash, token ids, extra key) match, across sessions.
    enable_prefix_caching: bool = True
    # "cpu", "cuda", or "auto" (cuda when available).
    device: str = "auto"
    # Weights, activations and KV dtype: "auto" is bfloat16 on a GPU and on a CPU with native bf16
    # (avx512_bf16 / amx_bf16), float32 on other CPUs (engine/core/dtypes.py says why).
    dtype: str = "auto"
    # Attention over the paged cache: "triton" (GPU: our paged kernels), "flash_attn" (GPU,
    # needs flash-attn, fp16/bf16 and block_size % 256 == 0), "sdpa" (CPU reference), "numba"
    # (CPU fp32/bf16: decode reads blocks in place), "auto" (flash_attn on GPU when usable, else
    # triton; numba on CPU in fp32/bf16, else sdpa). See engine/core/attention.py.
    attention_backend: str = "auto"
    # Capture decode steps in CUDA graphs at fixed batch sizes (CUDA only; ignored on the CPU).
    cuda_graphs: bool = True
    # Largest decode batch replayed from a CUDA graph, sequences (larger steps run eagerly).
    cuda_graph_max_batch: int = 128
    # Optional weight-only quantisation of the language model's linear layers (vision towers,
    # embeddings and the output head stay in the model dtype): None; "int4" (groups of 32, torch's
    # native CPU kernel); "int8" (a CPU: FBGEMM's dynamic int8, fast but its per-step activation scale
    # costs accuracy, the output head in int8 too; CUDA: bitsandbytes LLM.int8); "nf4" (bitsandbytes); "auto"
    # (int8 on a CPU without native bf16 when dtype is "auto" too and the model has dtypes.AUTO_INT8_FROM+ weights
    # in its linears, decided at load; else None: engine/core/dtypes.py says why). See models/quantize.py.
    quantization: str | None = None
    # int4 only: input features per (scale, zero) pair: 32, 64, 128 or 256. 32 (GGUF's Q4 block) makes int4 of a
    # dequantised Q4 GGUF recover its own codes (models/quantize.py).
    quantization_group_size: int = 32
    # Threads of the forward pass on the CPU; None adapts them to the load other processes put on
    # the machine, re-read every 2 s (engine/core/threads.py). Ignored on a GPU.
    cpu_threads: int | None = None
    # A LoRA adapter directory (peft format, e.g. from `dossier train queries`) merged into the
    # weights at load; None runs the base model.
    lora: str | None = None
    # Seed for requests that do not give their own (sampling with temperature > 0).
    seed: int = 0
    # Batch-invariant inference (CPU): a sequence's logits depend only on its own tokens, never on what else shares
    # the step, how its prefill was chunked, whether its prefix came from the cache or a run was resumed. Fixed row
    # tiles for the row-wise work, every query row through one attention kernel, per-row int8 scales, a fixed
    # thread count. Slower (docs/determinism.md); ignored with a warning on a GPU.
    deterministic: bool = False
    # Vision-language models: smallest and largest image area after resizing, in pixels
    # (qwen-vl-utils' min_pixels / max_pixels); None takes the model folder's, else the family's.
    image_min_pixels: int | None = None
    image_max_pixels: int | None = None
    # Memory for encoded images kept for reuse (keyed by content hash and size), in GiB.
    encoder_cache_gib: float = 1.0
    # Most vision patches one call of the vision tower encodes (images of many sessions batched).
    max_encoder_batch_patches: int = 65536
    # Structured output: longest a request waits for its grammar to compile, seconds (the compile runs off the
    # request's thread and goes on after; engine/core/structured.py), and compiled grammars kept, MiB (LRU).
    grammar_compile_timeout_s: float = 30.0
    grammar_cache_mib: float = 64.0
    # Grammars not yet in the cache accepted per second, and at once after a quiet spell (a token bucket; 0: no
    # rate). Off for an agent run, whose turns may each bring a schema; `dossier serve` turns it on
    # (engine/serve/config.py GRAMMAR_NEW_PER_S) so a client streaming distinct schemas gets 503s instead of
    # crowding out other clients.
    grammar_new_per_s: float = 0.0
    grammar_new_burst: int = 4

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise DossierError(f"block_size must be >= 1 token (got {self.block_size})")
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise DossierError(f"kv_cache_gib must be > 0 GiB, or None to size the pool automatically "
                               f"(got {self.kv_cache_gib})")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise DossierError(f"gpu_memory_utilization must be in (0, 1] (got {self.gpu_memory_utilization})")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise DossierError(f"max_model_len must be >= 1 token (got {self.max_model_len})")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise DossierError(f"num_kv_blocks must be >= 2 (got {self.num_kv_blocks})")
        if self.max_num_batched_tokens < 1:
            raise DossierError(f"max_num_batched_tokens must be >= 1 (got {self.max_num_batched_tokens})")
        if self.max_num_seqs < 1:
            raise DossierError(f"max_num_seqs must be >= 1 (got {self.max_num_seqs})")
        if self.speculative_tokens < 0:
            raise DossierError(f"speculative_tokens must be >= 0, 0 for off (got {self.speculative_tokens})")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise DossierError(f"cpu_threads must be >= 1, or None to adapt to the load (got {self.cpu_threads})")
        if self.device not in _DEVICES:
            raise DossierError(f"device {self.device!r} is not one of {', '.join(_DEVICES)}")
        if self.dtype not in _DTYPES:
            raise DossierError(f"dtype {self.dtype!r} is not one of {', '.join(_DTYPES)}")
        if self.attention_backend not in _BACKENDS:
            raise DossierError(f"attention_backend {self.attention_backend!r} is not one of {', '.join(_BACKENDS)}")
        if self.quantization is not None and self.quantization not in (*QUANTIZATIONS, "auto"):
            raise DossierError(f"quantization {self.quantization!r} is not one of {', '.join(QUANTIZATIONS)}, auto "
                               "(or None)")
        if self.quantization_group_size not in (32, 64, 128, 256):
            raise DossierError(f"quantization_group_size must be 32, 64, 128 or 256 (got {self.quantization_group_size})")
        if self.cuda_graph_max_batch < 1:
            raise DossierError(f"cuda_graph_max_batch must be >= 1 sequence (got {self.cuda_graph_max_batch})")
        for name in ("image_min_pixels", "image_max_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DossierError(f"{name} must be a positive number of pixels (got {value})")
        if self.image_min_pixels and self.image_max_pixels and self.image_min_pixels > self.image_max_pixels:
            raise DossierError(
                f"image_min_pixels ({self.image_min_pixels}) must not exceed image_max_pixels ({self.image_max_pixels})"
            )
        if self.encoder_cache_gib < 0:
            raise DossierError(f"encoder_cache_gib must be >= 0 GiB (got {self.encoder_cache_gib})")
        if self.grammar_compile_timeout_s <= 0:
            raise DossierError(f"grammar_compile_timeout_s must be > 0 seconds (got {self.grammar_compile_timeout_s})")
        if self.grammar_new_per_s < 0 or self.grammar_new_burst < 1:
            raise DossierError(f"grammar_new_per_s must be >= 0 and grammar_new_burst >= 1 (got "
                               f"{self.grammar_new_per_s}, {self.grammar_new_burst})")
        if self.grammar_cache_mib <= 0:
            raise DossierError(f"grammar_cache_mib must be > 0 MiB (got {self.grammar_cache_mib})")
        if self.max_encoder_batch_patches < 1:
            raise DossierError(f"max_encoder_batch_patches must be >= 1 (got {self.max_encoder_batch_patches})")
        if self.attention_backend == "flash_attn" and self.block_size % 256:
            raise DossierError(
                f"attention_backend='flash_attn' needs block_size to be a multiple of 256 (got {self.block_size})"
            )

    def resolved_device(self) -> str:
        """The device this config runs on: "cuda" or "cpu"."""
        if self.device != "auto":
            return self.device
        from engine.core.devices import auto_device

        return auto_device()  # warns, naming the driver a CUDA build needs, when a GPU is present but unusable

    def resolved_quantization(self) -> str | None:
        """`quantization`, or for "auto" what `auto_quantization` picks for this device and dtype."""
        if self.quantization != "auto":
            return self.quantization
        from engine.core.dtypes import auto_quantization

        return auto_quantization(self.resolved_device(), self.dtype).name

    def resolved_dtype(self):
        """The torch dtype of weights and KV cache: `dtype`, or for "auto" what `auto_dtype` picks here."""
        import torch

        from engine.core.dtypes import auto_dtype, warn_if_emulated

        device = self.resolved_device()
        name = auto_dtype(device).name if self.dtype == "auto" else self.dtype
        warn_if_emulated(device, name)
        return getattr(torch, name)
