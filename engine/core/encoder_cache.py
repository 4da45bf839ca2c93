"""Vision encoding for a step: the images of all its sessions in few tower calls, outputs cached by content hash.

Before each forward step the runner hands over the step's multimodal chunks. Every image
whose encoder output is not cached is encoded, all of them together (split only when a
call would exceed `max_batch_patches` vision patches), together with images further on in
the same sequences that are still to be prefilled while the patch budget allows, so the
next chunks of a long prefill find them ready. Outputs are kept least recently used first
within a byte budget, keyed by the image's content hash (pixels + resized size): a page
shown to many episodes is encoded once. A chunk keeps a reference to the output it uses,
so eviction never takes features from under the current step.
"""

import time
from collections import OrderedDict

from models.base import ModelAdapter, MultimodalChunk, MultimodalItem

__all__ = ["EncoderCache"]


class EncoderCache:
    """Encoder outputs of one adapter, by content hash; counts what it encodes and what it serves."""

    def __init__(self, adapter: ModelAdapter, capacity_bytes: int, max_batch_patches: int) -> None:
        self.adapter = adapter
        self.capacity_bytes = capacity_bytes
        self.max_batch_patches = max_batch_patches
        self.entries: OrderedDict[str, object] = OrderedDict()  # content hash -> features, LRU first
        self.bytes = 0
        self.images_encoded = 0  # images run through the vision tower
        self.image_tokens_encoded = 0  # LM tokens those images fill
        self.encoder_calls = 0  # calls of the vision tower
        self.hits = 0  # chunk lookups served by an output encoded in an earlier step
        self.evictions = 0  # outputs dropped to stay within the byte budget
        self.encode_time_s = 0.0  # wall time of encoding (preprocessing included), seconds

    def fill(self, chunks: list[MultimodalChunk], lookahead: list[MultimodalItem] = ()) -> None:
        """Set `encoded` on every chunk, encoding what is missing (and `lookahead` items, budget allowing)."""
        missing: dict[str, MultimodalItem] = {}
        for chunk in chunks:
            key = chunk.item.content_hash
            if key in self.entries:
                self.hits += 1
                self.entries.move_to_end(key)
            else:
                missing.setdefault(key, chunk.item)
        if missing:
            patches = sum(_patches(item) for item in missing.values())
            for item in lookahead:
                if item.content_hash in missing or item.content_hash in self.entries:
                    continue
                if patches + _patches(item) > self.max_batch_patches:
                    break
                missing[item.content_hash] = item
                patches += _patches(item)
            fresh = self._encode(list(missing.values()))
        else:
            fresh = {}
        for chunk in chunks:
            key = chunk.item.content_hash
            chunk.encoded = fresh[key] if key in fresh else self.entries[key]
        for key, features in fresh.items():
            self._store(key, features)

    def _encode(self, items: list[MultimodalItem]) -> dict[str, object]:
        started = time.perf_counter()
        out: dict[str, object] = {}
        batch: list[MultimodalItem] = []
        patches = 0
        for item in [*items, None]:
            if item is None or (batch and patches + _patches(item) > self.max_batch_patches):
                for done, features in zip(batch, self.adapter.encode_multimodal(batch)):
                    out[done.content_hash] = features
                self.encoder_calls += 1
                batch, patches = [], 0
            if item is not None:
                batch.append(item)
                patches += _patches(item)
        self.images_encoded += len(items)
        self.image_tokens_encoded += sum(item.length for item in items)
        self.encode_time_s += time.perf_counter() - started
        return out

    def _store(self, key: str, features) -> None:
        size = getattr(features, "nbytes", 0)
        if size > self.capacity_bytes:
            return  # larger than the whole budget: used for this step only
        self.entries[key] = features
        self.bytes += size
        while self.bytes > self.capacity_bytes:
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= getattr(evicted, "nbytes", 0)
            self.evictions += 1

    def stats(self) -> dict:
        return {
            "images_encoded": self.images_encoded,
            "image_tokens_encoded": self.image_tokens_encoded,
            "encoder_calls": self.encoder_calls,
            "encoder_cache_hits": self.hits,
            "encoder_cache_entries": len(self.entries),
            "encoder_cache_mib": round(self.bytes / 2**20, 2),
            "encoder_cache_evictions": self.evictions,
            "encode_time_s": round(self.encode_time_s, 4),
        }


def _patches(item: MultimodalItem) -> int:
    grid = getattr(item.data, "grid_thw", None)
    return grid[0] * grid[1] * grid[2] if grid else item.length
