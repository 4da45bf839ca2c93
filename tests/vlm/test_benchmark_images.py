"""The image benchmark's two sides agree: the engine's greedy tokens equal HF generate's on every history."""

from benchmarks.engine_images import ImageWorkload, run_image_benchmark
from engine.core.config import EngineConfig


def test_image_benchmark_outputs_match_and_pages_are_encoded_once():
    workload = ImageWorkload(sessions=3, turns=2, new_tokens=4, page_pool=6, page_width=300, page_height=400)
    result = run_image_benchmark("qwen2.5-vl-tiny", workload, EngineConfig(image_max_pixels=56 * 56))
    assert result["outputs_match"] and result["sessions_matching"] == 3
    assert result["pages_shown"] >= 3 * 2 * 3
    # each distinct page of the pool at most once (6), the peer re-encodes every image of every history
    assert result["vision"]["images_encoded"] <= 6
    assert result["naive_images_encoded"] > result["pages_shown"]
