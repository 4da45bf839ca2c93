"""The adapter of the vision-language families: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V (M-RoPE), Gemma-3 (1-D).

The families share one shape: a vision tower turns each image into one embedding per
placeholder token; a decoder-only LM reads text embeddings with the image embeddings
written over the placeholders. What differs comes from the family: the position scheme
(3-D rotary positions, temporal, height, width, for the M-RoPE families; 1-D for Gemma-3,
whose RoPE is the text model's), the image sizing (models/vision.py), the tower call
(`FamilySpec.build_tower`) and whether an image's tokens see each other both ways
(`FamilySpec.bidirectional_images`: the engine's attention and scheduler then apply it).

- The LM is the shared `DecoderModel` (models/decoder_model.py) with the family's layer
  switches and an M-RoPE position strategy (`RopeSpec.axes`: which position axis drives
  each rotary frequency); nothing here is a second decoder.
- The vision tower is the HF module of the family, built from the checkpoint's vision
  config: it needs no KV cache, and every image is encoded whole, so the engine batches
  the images of many sessions into one call and caches the outputs by content hash.
- M-RoPE positions are computed here for every appended segment, offset from the
  sequence's next position (the same rule as HF `get_rope_index`: text advances by one;
  an image of h x w merged patches at position p gets (p, p + row, p + col) and the next
  position is p + max(h, w)). Nothing is read from or stored on a model object's
  `rope_deltas`.
"""

import copy
import dataclasses

import torch

from models.base import AttentionFn, ChatProcessor, ForwardBatch, MultimodalItem, Segment
from models.decoder_model import DecoderModel
from models.vision import ImageFeatures, VisionProcessor
from models.vision_language.tower_attention import register_tower_attention
from tools.errors import DossierError

__all__ = ["VisionLanguageAdapter"]


class VisionLanguageAdapter(DecoderModel):
    """A vision-language family as the engine sees it: the shared decoder plus the family's HF vision tower."""

    def __init__(self, config, family, processor: ChatProcessor | None, vision: VisionProcessor,
                 name: str = "vlm") -> None:
        mrope = family.build_tower is None  # the M-RoPE families (Gemma-3's LM keeps its own text RoPE)
        params = config.text_config.rope_parameters or {}
        if mrope and params.get("rope_type", "default") != "default":
            raise DossierError(f"{name}: RoPE type {params.get('rope_type')!r} is not supported (only the default M-RoPE)")
        if mrope and getattr(config.text_config, "use_sliding_window", False):
            raise DossierError(f"{name}: sliding-window attention is not supported for M-RoPE vision-language models")
        self.image_token_id = config.image_token_id
        super().__init__(config, family, processor, vision, name)
        if family.bidirectional_images:
            self.shape = dataclasses.replace(self.shape, bidirectional_images=True)
        if family.build_tower is not None:
            self.visual = family.build_tower(config)
        else:
            # the tower gets its own copy of the vision config: its attention is ours, the config stays as loaded
            self.visual = family.vision_tower()._from_config(copy.deepcopy(config.vision_config),
                                                             attn_implementation="sdpa")
            # one variable-length call per layer over every image and window, instead of transformers' loop of SDPA
            # calls (set after building: transformers would look a name with "flash" up as a hub kernel)
            self.visual.config._attn_implementation = register_tower_attention()
        self._init_tower_buffers()

    def init_buffers(self) -> None:
        """Rotary tables of the LM and of the vision tower, recomputed on the weights' device (after `to_empty`)."""
        super().init_buffers()
        if hasattr(self, "visual"):
            self._init_tower_buffers()

    def _init_tower_buffers(self) -> None:
        device = self.embed_tokens.weight.device
        if device.type == "meta":
            return
        if hasattr(self.visual, "init_buffers"):  # a family-built tower recomputes its own
            self.visual.init_buffers()
            return
        with torch.device("cpu"):
            fresh = {name: type(m)(m.config) for name, m in self.visual.named_modules() if hasattr(m, "inv_freq")}
        for name, module in fresh.items():  # the tower's non-persistent rotary buffers
            target = self.visual.get_submodule(name)
            for buffer_name, buffer in module.named_buffers(recurse=False):
                target._buffers[buffer_name] = buffer.to(device)

    # --- positions ---------------------------------------------------------------

    def check_segment(self, segment: Segment) -> None:
        """Every image placeholder token of an appended segment belongs to an image, and vice versa."""
        covered = 0
        for item in segment.mm_items:
            span = segment.token_ids[item.offset : item.offset + item.length]
            if len(span) != item.length or any(t != self.image_token_id for t in span):
                raise DossierError(f"{self.name}: an image's {item.length} tokens must all be image placeholders")
            covered += item.length
        placeholders = segment.token_ids.count(self.image_token_id)
        if placeholders != covered:
            raise DossierError(
                f"{self.name}: the segment has {placeholders} image placeholder tokens but its images fill {covered}; "
                "append images with session.append_message(role, content, images=[...])"
            )

    def segment_positions(self, segment: Segment, next_position: int) -> tuple[list, int]:
        """3-D positions (time, height, width) of a segment's tokens, offset from `next_position` (1-D families:
        one position per token, images included)."""
        if segment.positions is not None or self.shape.position_dims == 1:
            return super().segment_positions(segment, next_position)
        merge = self.vision.sizing.merge_size
        positions: list[tuple[int, int, int]] = []
        p, cursor = next_position, 0
        for item in sorted(segment.mm_items, key=lambda i: i.offset):
            positions.extend((q, q, q) for q in range(p, p + item.offset - cursor))
            p += item.offset - cursor
            t, gh, gw = item.data.grid_thw
            rows, cols = gh // merge, gw // merge
            assert t == 1 and rows * cols == item.length, (item.data.grid_thw, item.length)
            positions.extend((p, p + r, p + c) for r in range(rows) for c in range(cols))
            p += max(rows, cols)
            cursor = item.offset + item.length
        tail = len(segment.token_ids) - cursor
        positions.extend((q, q, q) for q in range(p, p + tail))
        return positions, p + tail

    # --- vision ------------------------------------------------------------------

    @torch.inference_mode()
    def encode_multimodal(self, items: list[MultimodalItem]) -> list[ImageFeatures]:
        """Encode the images of `items` in one call of the vision tower."""
        tower_dtype = next(self.visual.parameters()).dtype
        device = self.embed_tokens.weight.device
        pixel_values, grid = self.vision.pixel_values([item.data for item in items])
        out = self.visual(pixel_values.to(device, tower_dtype), grid_thw=grid.to(device))
        sizes = [item.length for item in items]
        embeds = out.pooler_output.split(sizes)  # (tokens, hidden) per image
        assert all(e.shape[0] == n for e, n in zip(embeds, sizes)), "vision tower gave a different token count"
        deepstack = [d.split(sizes) for d in (getattr(out, "deepstack_features", None) or [])]
        return [ImageFeatures(e, [d[i] for d in deepstack]) for i, e in enumerate(embeds)]

    # --- forward -----------------------------------------------------------------

    def merge_images(self, batch: ForwardBatch, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(x with the step's image embeddings over their placeholders, those rows or None without images)."""
        if not batch.mm_chunks:
            return x, None
        spans = [torch.arange(c.batch_offset, c.batch_offset + c.stop - c.start) for c in batch.mm_chunks]
        rows = torch.cat(spans).to(x.device)
        embeds = torch.cat([c.encoded.embeds[c.start : c.stop] for c in batch.mm_chunks])
        return x.index_copy(0, rows, embeds.to(x.dtype)), rows

    def forward(self, batch: ForwardBatch, attention: AttentionFn) -> torch.Tensor:
        x, rows = self.merge_images(batch, self.embed(batch.input_ids))  # (tokens, hidden)
        deepstack = []
        if batch.mm_chunks:
            levels = len(batch.mm_chunks[0].encoded.deepstack)
            # Qwen3-VL adds intermediate vision features at the image rows after the first layers
            deepstack = [
                torch.cat([c.encoded.deepstack[level][c.start : c.stop] for c in batch.mm_chunks]).to(x.dtype)
                for level in range(levels)
            ]
        return self.decode(x, batch.positions, attention, rows, deepstack)
