"""Issue 46, finding 13: an image is preprocessed (PIL resize, normalisation, patches) in the thread that appends
it, never inside the engine's step, where it held the engine lock and stalled every decoding session."""

import threading

from engine import SamplingParams
from tests.vlm.conftest import make_image
from tests.vlm.test_parity import engine_for


def test_the_step_does_not_preprocess_pixels(vl_model):
    family, folder, _, _ = vl_model
    engine = engine_for(folder)
    vision = engine.processor.vision
    calls = []
    real = vision.image_processor

    def counted(*args, **kwargs):
        calls.append(threading.current_thread().name)
        return real(*args, **kwargs)

    vision.image_processor = counted
    session = engine.open_session()
    session.append_message("user", "Describe the page.", images=[make_image(56, 84, 5)])
    session.append_generation_prompt()
    appended = list(calls)
    assert appended, f"{family}: appending the image did not preprocess it"
    steps = []
    real_step = engine.step

    def step():
        before = len(calls)
        finished = real_step()
        steps.append(len(calls) - before)
        return finished

    engine.step = step
    session.generate(SamplingParams(max_new_tokens=2, ignore_eos=True))
    assert steps and sum(steps) == 0, f"{family}: the engine's steps preprocessed pixels {sum(steps)} times"
    again = engine.open_session()
    again.append_message("user", "And again.", images=[make_image(56, 84, 5)])
    assert len(calls) == len(appended), "the same image at the same size was preprocessed twice"
