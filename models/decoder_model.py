"""A decoder-only language model over the engine's paged KV cache: the adapter of every text family.

Embeddings (optionally scaled), the family's `DecoderLayer`s, a final RMSNorm and the output
head (tied to the embeddings or not, optionally soft-capped). Positions go through the
model's `Rotary` position strategy; vision-language families subclass this adapter
(models/vision_language/modeling.py) to write image embeddings over their placeholders and
compute M-RoPE positions, reusing the same decoder.

Build with the family's config under `torch.device("meta")`, materialise with `to_empty`,
call `init_buffers`, then `load_weights` (a checkpoint) or `random_init` (a shape).
"""

import torch
from torch import nn

from models import cpu_matmul
from models.base import AttentionFn, ChatProcessor, ForwardBatch, ModelAdapter, ModelShape
from models.decoder import DecoderLayer, RMSNorm
from models.rotary import Rotary
from tools.errors import DossierError

__all__ = ["DecoderModel"]

# Config keys of image/video marker tokens: random weights never let greedy decoding emit them.
_MARKER_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
                "image_start_token_id", "image_end_token_id")


class DecoderModel(ModelAdapter):
    """A family's language model as the engine sees it."""

    def __init__(self, config, family, processor: ChatProcessor | None, vision=None, name: str = "model") -> None:
        super().__init__()
        family.check_config(config)
        spec = family.decoder(config)
        self.config, self.family, self.spec = config, family, spec
        self.text_config = config.get_text_config()
        self.processor, self.vision, self.name = processor, vision, name
        layer = spec.layer
        self.shape = ModelShape(
            num_layers=spec.num_layers, num_kv_heads=layer.kv_heads, head_dim=layer.head_dim,
            vocab_size=spec.vocab_size, max_positions=spec.max_positions, position_dims=spec.rope.position_dims,
            **_window_fields(spec.windows),
        )
        windows = spec.windows or (None,) * spec.num_layers
        variants = spec.layer_variants or (spec.rope.variants[0],) * spec.num_layers
        self.embed_tokens = nn.Embedding(spec.vocab_size, layer.hidden)
        self.layers = nn.ModuleList(self.make_layer(i, windows[i], variants[i]) for i in range(spec.num_layers))
        self.norm = RMSNorm(layer.hidden, layer.eps, layer.norm_offset)
        self.lm_head = None if spec.tied else nn.Linear(layer.hidden, spec.vocab_size, bias=False)
        self.init_buffers()

    def make_layer(self, index: int, window: int | None, variant: str | None) -> nn.Module:
        """Decoder layer `index` (a family whose layers differ from the shared one overrides this: Gemma 4)."""
        return DecoderLayer(self.spec.layer, index, window, variant)

    @property
    def tied(self) -> bool:
        return self.lm_head is None

    def init_buffers(self) -> None:
        """(Re)compute the rotary tables on the weights' device (after `to_empty`)."""
        self.rotary = Rotary(self.spec.rope, self.text_config, self.embed_tokens.weight.device)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (tokens, hidden), scaled as the family does (Gemma: by sqrt(hidden), in the model dtype)."""
        x = self.embed_tokens(input_ids)
        if self.spec.embed_scale is not None:
            x = x * torch.tensor(self.spec.embed_scale, dtype=x.dtype)
        return x

    def forward(self, batch: ForwardBatch, attention: AttentionFn) -> torch.Tensor:
        if batch.mm_chunks:
            raise DossierError(f"{self.name} is a text-only model; it cannot take images")
        return self.decode(self.embed(batch.input_ids), batch.positions, attention)

    def decode(self, x: torch.Tensor, positions: torch.Tensor, attention: AttentionFn,
               rows: torch.Tensor | None = None, additions: list[torch.Tensor] = ()) -> torch.Tensor:
        """The layers and final norm over embeddings x (tokens, hidden).

        Args:
            positions: (tokens,) or (3, tokens) for M-RoPE.
            rows, additions: additions[i] (len(rows), hidden) is added at `rows` after layer i (Qwen3-VL DeepStack).
        """
        tables = self.rotary.cos_sin(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, tables[layer.variant], self.rotary, attention)
            if i < len(additions):
                x = x.index_add(0, rows, additions[i])
        return self.norm(x)

    def output_weight(self) -> torch.Tensor:
        """The output head's weight (vocab, hidden): the embeddings' where the family ties them."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = getattr(self, "int8_head", None)  # --quantization int8 on the CPU (models/quantize.py)
        logits = head(hidden) if head is not None else cpu_matmul.linear(hidden, self.output_weight())
        cap = self.spec.logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy checkpoint tensors (HF names, as the family's WeightNames list them) into place."""
        from models.weights import load_weights

        load_weights(self, tensors)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under transformers 5 names (fused projections split again), e.g. to build the HF reference."""
        from models.weights import hf_state_dict

        return hf_state_dict(self)

    @torch.no_grad()
    def random_init(self, seed: int = 0) -> None:
        """Random weights: norms 1, biases 0, LM weights N(0, initializer_range), vision tower weights N(0, 0.02).

        Drawn on the weights' device, so a 7B shape initialises in seconds on a GPU. The output rows
        of image/video marker tokens are zero, so greedy decoding never emits a placeholder (a
        trained model does not; a history holding one would be invalid input for the HF peer).
        """
        device = self.embed_tokens.weight.device
        generator = torch.Generator(device=device).manual_seed(seed)
        lm_std = getattr(self.text_config, "initializer_range", 0.02)
        for name, param in self.named_parameters():
            if "norm" in name or name.endswith(("ln_q.weight", "ln_q.bias")):
                param.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                std = 0.02 if name.startswith("visual.") else lm_std
                values = torch.empty(param.shape, dtype=torch.float32, device=device)
                param.copy_(values.normal_(0.0, std, generator=generator))
        for module in self.modules():
            if isinstance(module, RMSNorm) and module.offset:
                module.weight.fill_(1.0 - module.offset)  # a scale of 1, as the "1" above gives the others
        markers = [getattr(self.config, key, None) for key in _MARKER_KEYS]
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        head[[m for m in markers if m is not None and m < head.shape[0]]] = 0.0


def _window_fields(windows: tuple[int | None, ...]) -> dict:
    """ModelShape's `window` and `window_layers`: the sliding-window layers get a KV pool of their own when they
    share one window and some layers are global (no split when windows differ or every layer slides)."""
    sizes = {w for w in windows if w is not None}
    if len(sizes) != 1 or None not in windows:  # every layer sliding: nothing for the other pool to hold
        return {}
    window = sizes.pop()
    return {"window": window, "window_layers": tuple(i for i, w in enumerate(windows) if w == window)}
