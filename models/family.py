"""What a model family is: the one record the registry holds per family (see models/registry.py).

A family file (`models/families/<name>.py`) defines a `FamilySpec`: which HF config
`model_type`s it loads, how its decoder reads the config (`decoder`), the adapter class that
runs it, the factory of its chat and image processors, where its checkpoint keeps each tensor,
the vision tower (vision-language families), the transformers classes that compute the same
function (the parity tests' and benchmarks' peer), and its random-weight shapes.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from models.decoder import DecoderSpec
from models.weights import WeightNames
from tools.errors import DossierError

__all__ = ["FamilySpec", "InputsFactory"]


class InputsFactory(Protocol):
    """A family's processor factory: the chat processor and, for vision-language families, the image processor."""

    def build(self, config, folder, min_pixels: int | None, max_pixels: int | None) -> tuple[Any, Any]:
        """(ChatProcessor or None without a tokenizer, VisionProcessor or None for text models).

        Args:
            config: the model's HF config.
            folder: the model folder, or None for a random-weight shape.
            min_pixels, max_pixels: image area bounds in pixels (None: the folder's, else the family's).
        """
        ...


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One model family, registered once in models/registry.py."""

    name: str  # what users and errors call it, e.g. "qwen3"
    model_types: tuple[str, ...]  # HF config `model_type` values this family loads
    config_class: str  # transformers config class: random-weight shapes and test models are built from it
    reference_class: str  # transformers model class with the same weights and function: the parity tests' peer
    adapter: type  # the ModelAdapter subclass that runs it (DecoderModel, VisionLanguageAdapter)
    decoder: Callable[[Any], DecoderSpec]  # the language model's switches, read off the HF config
    inputs: InputsFactory  # processor factory (tokenizer + chat template, image processor)
    weights: WeightNames  # where the checkpoint keeps each of our tensors
    vision_tower: Callable[[], type] | None = None  # the HF vision tower class (imported when called); None: text
    # builds the tower from the whole config when it is more than the HF class (Gemma-3: SigLIP plus its pooling
    # projector); it takes (pixel_values, grid_thw=) and returns `pooler_output` (tokens, hidden). None: the class
    build_tower: Callable[[Any], Any] | None = None
    bidirectional_images: bool = False  # an image's tokens attend to each other both ways (Gemma-3)
    shapes: Mapping[str, dict] = field(default_factory=dict)  # random-weight shapes: name -> config kwargs
    # The family's own config kwargs for tiny parity-test models (sliding windows, head_dim, ...); tests add
    # the common tiny sizes and their tokenizer's vocabulary. VL families: text_config / vision_config dicts.
    tiny: Mapping[str, Any] = field(default_factory=dict)

    def config(self, **kwargs):
        """An HF config of this family from keyword arguments."""
        import transformers

        return getattr(transformers, self.config_class)(**kwargs)

    def reference(self) -> type:
        """The transformers model class the engine is compared with."""
        import transformers

        return getattr(transformers, self.reference_class)

    @property
    def is_vision_language(self) -> bool:
        return self.vision_tower is not None

    def check_config(self, config) -> None:
        """Raise DossierError when `config` is not of this family."""
        if config.model_type not in self.model_types:
            raise DossierError(f"model type {config.model_type!r} is not a {self.name} model ({', '.join(self.model_types)})")
