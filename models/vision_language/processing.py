"""Inputs of the vision-language families: tokenizer, chat template and image processor from a folder.

Nothing comes from a hub. When the model folder holds the processor files
(`preprocessor_config.json`), `AutoProcessor` builds the family's processor and we take
its image processor, tokenizer and chat template; otherwise the image processor is the
family's own class built from the vision config (an image-only processor), and the
tokenizer, when the folder has one, comes from `AutoTokenizer`.

Image size bounds: `min_pixels` / `max_pixels` given by the caller win; then the image
processor's configured bounds; then the family's defaults (qwen-vl-utils' for Qwen).
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from models.chat_template import TemplateChatProcessor
from models.vision import ImageSizing, VisionProcessor
from tools.errors import DossierError

__all__ = ["FamilyInputs", "build_processors"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FamilyInputs:
    """What a family's inputs need that its config does not say."""

    image_processor_class: str  # transformers class name of the PIL image processor
    image_mean: tuple[float, float, float]  # per-channel normalisation of the fallback processor
    image_std: tuple[float, float, float]
    default_min_pixels: int  # bounds when neither the caller nor the folder gives them
    default_max_pixels: int
    rule: str  # sizing rule of models.vision.ImageSizing: "qwen", "glm", "fixed" (Gemma-3: the tower's square), "gemma4"
    start_token: str  # token opening an image in the template
    end_token: str  # token closing it
    stop_tokens: tuple[str, ...]  # end-of-turn tokens besides the tokenizer's EOS
    markers: tuple[tuple[str, str], ...] = ()  # (config key, token) of each image/video marker token
    # (what the chat template renders per image, the text it stands for) when the HF processor rewrites it: Gemma-3's
    # template writes <start_of_image>, its processor "\n\n<start_of_image>" + placeholders + "<end_of_image>\n\n"
    image_text: tuple[str, str] | None = None

    def build(self, config, folder: Path | None, min_pixels: int | None = None, max_pixels: int | None = None):
        """The family's processor factory: see `build_processors`."""
        return build_processors(self, config, folder, min_pixels, max_pixels)


def _image_processor(family: FamilyInputs, vision_config, folder: Path | None):
    """(image processor, tokenizer or None, chat template or None) from the folder, else built from the config."""
    import transformers

    tokenizer = template = None
    if folder is not None and (folder / "preprocessor_config.json").is_file():
        try:
            processor = transformers.AutoProcessor.from_pretrained(folder)
            return processor.image_processor, getattr(processor, "tokenizer", None), getattr(processor, "chat_template", None)
        except Exception as err:  # a partial processor folder: fall back to its image processor alone
            log.warning("AutoProcessor could not load %s (%s); using the image processor alone", folder, err)
            cls = getattr(transformers, family.image_processor_class)
            image_processor = cls.from_pretrained(folder)
    else:
        cls = getattr(transformers, family.image_processor_class)
        if family.rule == "fixed":  # the tower's square
            side = vision_config.image_size
            image_processor = cls(size={"height": side, "width": side}, image_mean=list(family.image_mean),
                                  image_std=list(family.image_std))
        elif family.rule == "gemma4":  # a patch budget; the processor pads every image to it
            side = vision_config.patch_size * vision_config.pooling_kernel_size
            image_processor = cls(patch_size=vision_config.patch_size, pooling_kernel_size=vision_config.pooling_kernel_size,
                                  max_soft_tokens=family.default_max_pixels // side**2)
        else:
            image_processor = cls(
                patch_size=vision_config.patch_size, temporal_patch_size=vision_config.temporal_patch_size,
                merge_size=vision_config.spatial_merge_size, image_mean=list(family.image_mean),
                image_std=list(family.image_std),
            )
    if folder is not None and any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return image_processor, tokenizer, template


def _bounds(image_processor) -> tuple[int | None, int | None]:
    size = getattr(image_processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else lambda k, d=None: getattr(size, k, d)
    low = get("shortest_edge", None) or getattr(image_processor, "min_pixels", None)
    high = get("longest_edge", None) or getattr(image_processor, "max_pixels", None)
    return low, high


def build_processors(family: FamilyInputs, config, folder: Path | None, min_pixels: int | None = None,
                     max_pixels: int | None = None) -> tuple[TemplateChatProcessor | None, VisionProcessor]:
    """The chat processor (None without a tokenizer) and the vision processor of a VL model.

    Args:
        family: the family's input conventions.
        config: the model's HF config (image token ids, vision config).
        folder: the model folder, or None for a random-weight shape.
        min_pixels, max_pixels: image area bounds in pixels (None: the folder's, else the family's).
    """
    vision_config = config.vision_config
    image_processor, tokenizer, template = _image_processor(family, vision_config, folder)
    folder_low, folder_high = _bounds(image_processor) if folder is not None else (None, None)
    low = min_pixels or folder_low or family.default_min_pixels
    high = max_pixels or folder_high or family.default_max_pixels
    if min_pixels is None and low > high:  # a small max_pixels with the folder's larger minimum
        low = high
    if family.rule == "fixed":  # every image becomes the tower's square, pooled to mm_tokens_per_image tokens
        if min_pixels is not None or max_pixels is not None:
            log.warning("%s resizes every image to %d pixels square: image_min_pixels / image_max_pixels are ignored",
                        config.model_type, vision_config.image_size)
        area = vision_config.image_size**2
        sizing = ImageSizing(vision_config.patch_size, 1, area, area, "fixed", 1,
                             tokens_per_image=config.mm_tokens_per_image)
    elif family.rule == "gemma4":
        sizing = _gemma4_sizing(config, image_processor if folder is not None else None, min_pixels, max_pixels)
    else:
        sizing = ImageSizing(vision_config.patch_size, vision_config.spatial_merge_size, low, high, family.rule,
                             vision_config.temporal_patch_size)
    processor_patch = getattr(image_processor, "patch_size", sizing.patch_size)
    if processor_patch != sizing.patch_size:
        raise DossierError(
            f"the image processor's patch size {processor_patch} differs from the vision tower's {sizing.patch_size}"
        )
    start_id, end_id = _marker_ids(config, family, tokenizer)
    vision = VisionProcessor(image_processor, sizing, config.image_token_id, start_id, end_id)
    if tokenizer is None:
        return None, vision
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template
    pad = tokenizer.convert_ids_to_tokens(config.image_token_id)
    if pad is None:
        raise DossierError(f"the tokenizer has no token with the config's image_token_id {config.image_token_id}")
    return TemplateChatProcessor(tokenizer, extra_stop_tokens=family.stop_tokens, vision=vision,
                                 image_text=family.image_text), vision


# Gemma 4's image processor accepts these budgets only (tokens per image after pooling)
GEMMA4_SOFT_TOKENS = (70, 140, 280, 560, 1120)


def _gemma4_sizing(config, image_processor, min_pixels: int | None, max_pixels: int | None) -> ImageSizing:
    """Gemma 4: every image is scaled, up or down, to fill a budget of tokens (the folder's `max_soft_tokens`, 280
    in the published models); `max_pixels` picks the largest of its budgets that fits in that many pixels."""
    vision = config.vision_config
    side = vision.patch_size * vision.pooling_kernel_size  # pixels per side of one LM token
    tokens = getattr(image_processor, "max_soft_tokens", None) or 280
    if max_pixels is not None:
        fitting = [t for t in GEMMA4_SOFT_TOKENS if t * side**2 <= max_pixels]
        tokens = fitting[-1] if fitting else GEMMA4_SOFT_TOKENS[0]
        if tokens * side**2 != max_pixels:
            log.warning("%s sizes images to a budget of %s tokens (%d pixels each): image_max_pixels=%d becomes %d",
                        config.model_type, "/".join(map(str, GEMMA4_SOFT_TOKENS)), side**2, max_pixels,
                        tokens * side**2)
    if min_pixels is not None:
        log.warning("%s scales every image to its token budget: image_min_pixels is ignored", config.model_type)
    return ImageSizing(vision.patch_size, vision.pooling_kernel_size, side**2, tokens * side**2, "gemma4", 1)


def _marker_ids(config, family: FamilyInputs, tokenizer) -> tuple[int, int]:
    """Ids of the tokens around an image: from the config, else from the tokenizer."""
    for start_key, end_key in (("vision_start_token_id", "vision_end_token_id"),
                               ("image_start_token_id", "image_end_token_id"), ("boi_token_index", "eoi_token_index"),
                               ("boi_token_id", "eoi_token_id")):
        start, end = getattr(config, start_key, None), getattr(config, end_key, None)
        if start is not None and end is not None:
            return start, end
    if tokenizer is None:
        raise DossierError(f"the config names no image start/end token ids ({family.start_token}, {family.end_token})")
    return tokenizer.convert_tokens_to_ids(family.start_token), tokenizer.convert_tokens_to_ids(family.end_token)
