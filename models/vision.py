"""Images for the vision-language families: sizing, content hashing, pixel preprocessing.

Sizing follows `qwen-vl-utils` (`smart_resize`): an image is resized so both sides are
multiples of `patch_size * merge_size` (28 for Qwen2/2.5-VL, 32 for Qwen3-VL) and its
area lies within [min_pixels, max_pixels], keeping the aspect ratio; GLM-4V uses its
own variant (it counts two temporal frames against the budget); Gemma 4 resizes every image, up or
down, to the largest size within a patch budget whose sides are multiples of patch_size * pooling kernel
(`gemma4_resize`). The token cost of an image is therefore known from its width and height alone, before
anything is encoded.

An image enters a conversation as a `MultimodalItem` whose `content_hash` is a digest
of its pixels plus its resized size: that hash joins the key of every KV block the
image's placeholder tokens touch, and keys the engine's encoder cache, so the same page
at the same size is encoded once however many episodes look at it.

Pixels are preprocessed when the image enters a conversation (`item`, called while a message is
rendered: in the episode's or the request's thread, never in the engine's step), with the family's
Hugging Face image processor and `do_resize=False` after our own resize, and kept in a byte-bounded
LRU by content hash: the step that encodes the image only gathers them (an image evicted meanwhile
is preprocessed again there). Preprocessing inside the step held the engine's lock while PIL
resized a page, stalling every decoding session.
"""

import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from models.base import MultimodalItem, Segment
from tools.errors import DossierError

__all__ = ["ImageFeatures", "ImageSizing", "PreparedImage", "VisionProcessor", "gemma4_resize", "page_image_content",
           "smart_resize"]

MAX_ASPECT_RATIO = 200  # qwen-vl-utils and the HF processors refuse thinner images


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) as `qwen_vl_utils.smart_resize` computes them: multiples of `factor`, area in bounds."""
    if min(height, width) < 1:
        raise DossierError(f"image of {width}x{height} pixels is empty")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise DossierError(
            f"image of {width}x{height} pixels has an aspect ratio above {MAX_ASPECT_RATIO}; crop or pad it first"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if min(h_bar, w_bar) < factor:  # qwen-vl-utils would return a zero side here
        raise DossierError(
            f"image of {width}x{height} pixels is too thin for max_pixels={max_pixels}: its short side would "
            f"shrink below {factor} pixels; crop it or raise max_pixels"
        )
    return h_bar, w_bar


def _glm_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int, frames: int) -> tuple[int, int]:
    """GLM-4V's smart_resize for a still image (counted as `frames` temporal frames), as its HF processor does."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise DossierError(
            f"image of {width}x{height} pixels has an aspect ratio above {MAX_ASPECT_RATIO}; crop or pad it first"
        )
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if frames * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif frames * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def gemma4_resize(height: int, width: int, patch_size: int, max_patches: int, kernel: int) -> tuple[int, int]:
    """(height, width) as Gemma 4's image processor resizes an image: the aspect ratio kept, the area scaled (up or
    down) to `max_patches` patches, each side rounded down to a multiple of patch_size * kernel (`kernel` x `kernel`
    patches are pooled into one LM token); a side that rounds to zero becomes one multiple."""
    if min(height, width) < 1:
        raise DossierError(f"image of {width}x{height} pixels is empty")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise DossierError(
            f"image of {width}x{height} pixels has an aspect ratio above {MAX_ASPECT_RATIO}; crop or pad it first"
        )
    side = patch_size * kernel
    factor = math.sqrt(max_patches * patch_size**2 / (height * width))
    h_bar, w_bar = int(math.floor(factor * height / side)) * side, int(math.floor(factor * width / side)) * side
    longest = (max_patches // kernel**2) * side
    if h_bar == 0:
        h_bar, w_bar = side, min(int(math.floor(width / height)) * side, longest)
    elif w_bar == 0:
        h_bar, w_bar = min(int(math.floor(height / width)) * side, longest), side
    return h_bar, w_bar


@dataclass(frozen=True, slots=True)
class ImageSizing:
    """How a family turns an image's size into a patch grid and a number of LM tokens."""

    patch_size: int  # pixels per side of one vision patch (14 for Qwen2/2.5-VL and GLM-4V, 16 for Qwen3-VL)
    merge_size: int  # patches per side merged into one LM token (2)
    min_pixels: int  # smallest resized area, in pixels (smaller images are upscaled)
    max_pixels: int  # largest resized area, in pixels (larger images are downscaled)
    # "qwen": qwen-vl-utils smart_resize; "glm": GLM-4V's (two temporal frames); "fixed": one size; "gemma4": the
    # largest size within max_pixels (merge_size is the pooling kernel)
    rule: str = "qwen"
    temporal_patch_size: int = 2  # frames per temporal patch (a still image is repeated to fill it)
    # "fixed" (Gemma-3): every image is resized to the tower's square (min_pixels = max_pixels = side^2) and pooled
    # to this many LM tokens
    tokens_per_image: int | None = None

    def __post_init__(self) -> None:
        if self.rule not in ("qwen", "glm", "fixed", "gemma4"):
            raise DossierError(f"image sizing rule {self.rule!r} is not 'qwen', 'glm', 'fixed' or 'gemma4'")
        if self.rule == "fixed" and (self.min_pixels != self.max_pixels or not self.tokens_per_image):
            raise DossierError("a fixed image size needs min_pixels == max_pixels (the side squared) and "
                               "tokens_per_image")
        if self.min_pixels < 1 or self.max_pixels < self.min_pixels:
            raise DossierError(
                f"image pixel bounds must satisfy 1 <= min_pixels <= max_pixels (got min_pixels={self.min_pixels}, "
                f"max_pixels={self.max_pixels})"
            )
        if self.max_pixels < self.factor**2:
            raise DossierError(
                f"max_pixels={self.max_pixels} is below one {self.factor}x{self.factor} token; use at least {self.factor ** 2}"
            )

    @property
    def factor(self) -> int:
        """Side of the pixel square one LM token covers."""
        return self.patch_size * self.merge_size

    @property
    def fixed(self) -> bool:
        """Every image is resized to one square (the tower's input) and costs `tokens_per_image` tokens."""
        return self.rule == "fixed"

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(height, width) the image is resized to before patching."""
        if self.rule == "glm":
            return _glm_resize(height, width, self.factor, self.min_pixels, self.max_pixels, self.temporal_patch_size)
        if self.fixed:
            side = math.isqrt(self.max_pixels)
            return side, side
        if self.rule == "gemma4":
            return gemma4_resize(height, width, self.patch_size, self.max_pixels // self.patch_size**2, self.merge_size)
        return smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)

    def grid(self, width: int, height: int) -> tuple[int, int, int]:
        """(t, h, w) grid of vision patches, as `image_grid_thw` holds it."""
        h, w = self.resized(width, height)
        return 1, h // self.patch_size, w // self.patch_size

    def num_tokens(self, width: int, height: int) -> int:
        """Placeholder tokens the image fills in the LM sequence."""
        if self.fixed:
            return self.tokens_per_image
        _, gh, gw = self.grid(width, height)
        return gh * gw // self.merge_size**2


@dataclass(slots=True)
class PreparedImage:
    """An image sized for its family, waiting to be encoded (the `data` of its MultimodalItem)."""

    image: object  # the PIL image as given (resized when encoded)
    height: int  # resized height, pixels
    width: int  # resized width, pixels
    grid_thw: tuple[int, int, int]  # (t, h, w) patch grid
    digest: str  # hash of the original pixels


@dataclass(slots=True)
class ImageFeatures:
    """An image's encoder output: one LM embedding per placeholder, plus DeepStack features (Qwen3-VL)."""

    embeds: torch.Tensor  # (tokens, hidden)
    deepstack: list[torch.Tensor] = field(default_factory=list)  # per injected layer, each (tokens, hidden)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.embeds, *self.deepstack))


def _digest(image) -> str:
    """Content hash of the pixels (mode, size and bytes), so equal pages from different files share it."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{image.mode}|{image.size[0]}x{image.size[1]}|".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def _to_rgb(image):
    """RGB with a white background under transparency (what qwen-vl-utils does)."""
    from PIL import Image

    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.split()[3])
        return background
    return image.convert("RGB")


class VisionProcessor:
    """A family's image handling: token cost, placeholder tokens, content hash, pixel preprocessing.

    Works without a tokenizer (random-weight shapes take token ids only), so it knows the
    placeholder token ids itself.
    """

    def __init__(self, image_processor, sizing: ImageSizing, image_token_id: int, start_token_id: int,
                 end_token_id: int, pixel_cache_bytes: int = 512 * 2**20) -> None:
        self.image_processor = image_processor  # the family's HF image processor (normalisation, patch layout)
        self.sizing = sizing
        self.image_token_id = image_token_id  # the placeholder repeated once per image token
        self.start_token_id = start_token_id  # opens an image (<|vision_start|>, <|begin_of_image|>)
        self.end_token_id = end_token_id  # closes it
        self.pixel_cache_bytes = pixel_cache_bytes  # preprocessed pixels kept by content key, bytes (LRU)
        self._pixels: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._pixel_bytes = 0
        self._pixels_lock = threading.Lock()
        self.preprocessed_in_step = 0  # images the encoding step had to preprocess itself (evicted meanwhile)

    def image_tokens(self, image) -> int:
        """Tokens an image adds to a conversation: its placeholders plus the start and end markers.

        Args:
            image: a PIL image, or its (width, height) in pixels.
        """
        width, height = image if isinstance(image, tuple) else _size(image)
        return self.sizing.num_tokens(width, height) + 2

    def prepare(self, image) -> PreparedImage:
        """Size and hash an image (cheap: no pixel preprocessing yet)."""
        width, height = _size(image)
        h, w = self.sizing.resized(width, height)
        return PreparedImage(image, h, w, (1, h // self.sizing.patch_size, w // self.sizing.patch_size), _digest(image))

    def item(self, image, offset: int) -> MultimodalItem:
        """The multimodal item of an image whose first placeholder is token `offset` of its segment; its pixels are
        preprocessed here, in the caller's thread, unless the same image at the same size already was."""
        prepared = self.prepare(image)
        _, gh, gw = prepared.grid_thw
        length = self.sizing.tokens_per_image if self.sizing.fixed else gh * gw // self.sizing.merge_size**2
        # The hash covers the pixels and the resized size: the same page at another size is another input.
        key = f"{prepared.digest}:{prepared.height}x{prepared.width}"
        self._cached_pixels(prepared, key)
        return MultimodalItem(offset, length, key, prepared)

    def _cached_pixels(self, prepared: PreparedImage, key: str) -> tuple[torch.Tensor, bool]:
        """(the image's preprocessed patches, whether they had to be computed now)."""
        with self._pixels_lock:
            pixels = self._pixels.get(key)
            if pixels is not None:
                self._pixels.move_to_end(key)
                return pixels, False
        pixels = self._preprocess([prepared])[0]
        with self._pixels_lock:
            if key not in self._pixels:
                self._pixels[key] = pixels
                self._pixel_bytes += pixels.numel() * pixels.element_size()
                while self._pixel_bytes > self.pixel_cache_bytes and len(self._pixels) > 1:
                    _, old = self._pixels.popitem(last=False)
                    self._pixel_bytes -= old.numel() * old.element_size()
        return pixels, True

    def _preprocess(self, images: list[PreparedImage]) -> torch.Tensor:
        """pixel_values (patches, channels * temporal * patch^2) of `images` from the family's image processor; for
        a fixed-size family one (1, channels, side, side) tensor per image."""
        from PIL import Image

        if self.sizing.fixed:  # one square for every image: the family's processor resizes it, as HF's does
            out = self.image_processor(images=[_to_rgb(p.image) for p in images], return_tensors="pt")
            return out["pixel_values"].split(1)  # (1, channels, side, side) each
        if self.sizing.rule == "gemma4":  # the processor resizes too (to our size), then pads to its budget: unpad
            kernel, patch = self.sizing.merge_size, self.sizing.patch_size
            out = self.image_processor(images=[_to_rgb(p.image) for p in images], return_tensors="pt",
                                       max_soft_tokens=self.sizing.max_pixels // (patch * kernel) ** 2)
            counts = [t * h * w for t, h, w in (p.grid_thw for p in images)]
            given = [n * kernel**2 for n in out["num_soft_tokens_per_image"]]
            assert given == counts, f"image processor patches {given} != sizing {counts}"
            return [pixels[:n] for pixels, n in zip(out["pixel_values"], counts)]  # (patches, 3 * patch^2) each
        resized = [_to_rgb(p.image).resize((p.width, p.height), Image.Resampling.BICUBIC) for p in images]
        out = self.image_processor(images=resized, do_resize=False, return_tensors="pt")
        grid = out["image_grid_thw"]
        expected = torch.tensor([p.grid_thw for p in images], dtype=grid.dtype)
        assert torch.equal(grid, expected), f"image processor grid {grid.tolist()} != sizing {expected.tolist()}"
        return out["pixel_values"].split([t * h * w for t, h, w in expected.tolist()])

    def image_segment(self, image) -> Segment:
        """[start, placeholder x N, end] for one image, for callers appending token ids without a template."""
        item = self.item(image, offset=1)
        return Segment([self.start_token_id, *[self.image_token_id] * item.length, self.end_token_id], mm_items=[item])

    def pixel_values(self, images: list[PreparedImage]) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel_values (patches, channels * temporal * patch^2), image_grid_thw (images, 3)) for the tower: the
        patches preprocessed when each image entered its conversation, gathered.

        Gemma 4 ("gemma4"): (pixel_values (images, patches, 3 * patch^2), image_position_ids (images, patches, 2)),
        each image's patches padded to the batch's longest with position (-1, -1), as its HF processor pads them.
        """
        parts = []
        for prepared in images:
            pixels, computed = self._cached_pixels(prepared, f"{prepared.digest}:{prepared.height}x{prepared.width}")
            self.preprocessed_in_step += computed
            parts.append(pixels)
        if self.sizing.rule == "gemma4":
            return _padded_patches(parts, [p.grid_thw for p in images])
        grid = torch.tensor([p.grid_thw for p in images], dtype=torch.int64)
        return torch.cat(parts), grid


def _padded_patches(parts: list[torch.Tensor], grids: list[tuple[int, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Patches of several images stacked, each padded to the longest; every patch's (x, y) in its image's grid
    (row by row), (-1, -1) for padding."""
    longest = max(part.shape[0] for part in parts)
    pixels = parts[0].new_zeros(len(parts), longest, parts[0].shape[1])
    positions = torch.full((len(parts), longest, 2), -1, dtype=torch.int64)
    for i, (part, (_, rows, cols)) in enumerate(zip(parts, grids)):
        pixels[i, : part.shape[0]] = part
        y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        positions[i, : rows * cols] = torch.stack([x.flatten(), y.flatten()], dim=-1)
    return pixels, positions


def _size(image) -> tuple[int, int]:
    try:
        width, height = image.size
    except AttributeError:
        raise DossierError(f"an image must be a PIL.Image (got {type(image).__name__})") from None
    if width < 1 or height < 1:
        raise DossierError(f"image of {width}x{height} pixels is empty")
    return width, height


def page_image_content(pages, text: str | None = None) -> list[dict]:
    """Message content showing page images, each labelled `File: {document}, Page: {page}` as MADQA's agent does.

    Args:
        pages: (document, page, PIL image) triples, e.g. search hits rendered by `CorpusStore.render`.
        text: optional text placed before the pages (e.g. "Search results for: ...").
    Returns:
        content parts for `session.append_message(role, parts)`.
    """
    parts: list[dict] = [{"type": "text", "text": text}] if text else []
    for document, page, image in pages:
        parts.append({"type": "text", "text": f"File: {document}, Page: {page}\n"})
        parts.append({"type": "image", "image": image})
        parts.append({"type": "text", "text": "\n"})
    return parts
