"""Images in chat messages on a tiny random Qwen2-VL: data URLs decoded, cached by content, never confused."""

import base64
import io

import numpy as np

from engine.core.sampling_params import SamplingParams
from engine.serve.prompt import ImageLimits, render_chat
from engine.serve.protocol import ChatMessage


def data_url(seed: int, size=(56, 56)) -> str:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def messages(url: str) -> list[dict]:
    return [{"role": "system", "content": "You read document pages."},
            {"role": "user", "content": [{"type": "text", "text": "File: report, Page: 3\n"},
                                         {"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "What was the revenue?"}]}]


def ask(live, url: str, **kwargs):
    return live.client.chat.completions.create(model=live.model, messages=messages(url), max_tokens=6, temperature=0,
                                               extra_body={"ignore_eos": True}, **kwargs)


def test_an_image_message_is_answered_like_the_engine_does_in_process(vl_live):
    url = data_url(1)
    reply = ask(vl_live, url)
    engine = vl_live.backend.engine
    prompt = render_chat(engine.processor, [ChatMessage(**m) for m in messages(url)], None, None,
                         ImageLimits(2**24, 10**7, 8))
    assert len(prompt.image_hashes()) == 1
    assert reply.usage.prompt_tokens == prompt.num_tokens
    session = engine.open_session()  # the same tokens and image through the engine directly
    for segment in prompt.segments:
        session.append_segment(segment)
    direct = session.generate(SamplingParams(max_new_tokens=6, ignore_eos=True))
    session.close()
    assert reply.choices[0].message.content == direct.text
    assert reply.usage.completion_tokens == 6


def test_the_same_image_is_cached_and_another_image_is_not_confused_with_it(vl_live):
    url, other = data_url(2), data_url(3)
    first = ask(vl_live, url)
    again = ask(vl_live, url)
    image_start = render_chat(vl_live.backend.processor, [ChatMessage(**m) for m in messages(url)], None, None,
                              ImageLimits(2**24, 10**7, 8)).image_hashes()[0][0]
    # the whole prompt but its partial last block comes back from the cache, the image's blocks included
    assert again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens - 4 > image_start
    assert again.choices[0].message.content == first.choices[0].message.content
    swapped = ask(vl_live, other)  # same text, same token ids, another image: its blocks must not be reused
    assert swapped.usage.prompt_tokens == first.usage.prompt_tokens
    assert swapped.usage.prompt_tokens_details.cached_tokens <= image_start
