"""Progress of a GGUF conversion in a log: our plain lines instead of transformers' tqdm bar.

transformers' GGUF reader (`load_gguf_checkpoint`) wraps its tensor loop in `tqdm.auto.tqdm`
directly, not in its own `transformers.utils.logging.tqdm`, so `disable_progress_bar()` does not
reach it; in a log file the bar is hundreds of carriage-return updates. When the stream is not a
terminal, `conversion_progress` swaps that module's `tqdm` name for a counter that feeds a
`tools.progress.LiveProgress` (a plain line every few seconds: phase, tensors done/total,
elapsed), turns transformers' and huggingface_hub's own bars off, and puts all three back as they
were when the block ends, error or not. On a terminal it changes nothing: the bar is the progress.

    with conversion_progress("model.gguf") as say:
        say("reading the config")
        load_gguf_checkpoint(...)          # "converting model.gguf: dequantising tensors 120/272, elapsed 6s"
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from tools.progress import LiveProgress

__all__ = ["conversion_progress"]


@contextmanager
def conversion_progress(name: str, stream=None, every: float = 5.0) -> Iterator[Callable[[str], None]]:
    """Plain progress lines for converting the GGUF file `name` when `stream` (stderr) is not a terminal.

    Args:
        name: the file being converted (first on every line).
        stream: where lines go; default sys.stderr. A terminal keeps transformers' own bar.
        every: seconds between plain lines.

    Yields:
        say(phase): names what runs now ("reading the config", "writing safetensors").
    """
    stream = stream or sys.stderr
    if stream.isatty():
        yield lambda _phase: None
        return
    import huggingface_hub.utils as hub_utils
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    with LiveProgress(f"converting {name}", every=every, stream=stream, terminal=False) as progress:
        def counted(iterable: Iterable, desc: str | None = None, **_kwargs) -> Iterator:
            progress.phase("dequantising tensors")
            total = len(iterable) if hasattr(iterable, "__len__") else None
            for done, item in enumerate(iterable):
                progress.update(done=done, total=total)
                yield item
            progress.update(done=total, total=total)

        bar = gguf_utils.tqdm
        transformers_bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
        gguf_utils.tqdm = counted
        hf_logging.disable_progress_bar()
        try:
            yield progress.phase
        finally:
            gguf_utils.tqdm = bar
            if transformers_bars:
                hf_logging.enable_progress_bar()
            if hub_bars_off:
                hub_utils.disable_progress_bars()
            else:
                hub_utils.enable_progress_bars()
