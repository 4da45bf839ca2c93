"""A model whose image tokens attend both ways (Gemma-3) never has an image split between prefill chunks."""

from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence
from models.base import MultimodalItem


def sequence_with_image(computed: int) -> Sequence:
    seq = Sequence(0, 4)
    seq.append(list(range(40)), list(range(40)), 40, [MultimodalItem(offset=10, length=12, content_hash="img")])
    seq.num_computed_tokens = computed
    return seq


def test_a_chunk_ends_before_an_image_or_runs_to_its_end():
    scheduler = Scheduler(EngineConfig(), BlockManager(64, 4))
    scheduler.whole_images = True
    cut = scheduler._whole_images
    assert cut(sequence_with_image(0), 16, extend=True) == 10  # would end inside the image: ends before it
    assert cut(sequence_with_image(10), 4, extend=True) == 12  # starts at the image: the whole image, past the budget
    assert cut(sequence_with_image(10), 4, extend=False) == 0  # no room for the whole image: wait
    assert cut(sequence_with_image(0), 30, extend=True) == 30  # the image lies inside the chunk
    assert cut(sequence_with_image(0), 10, extend=True) == 10  # ends exactly where the image starts
    scheduler.whole_images = False  # causal images (Qwen-VL, GLM-4V) may be split anywhere
    assert cut(sequence_with_image(0), 16, extend=True) == 16
