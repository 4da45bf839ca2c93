"""Progress of long commands: a rich bar on a terminal, plain lines every few seconds anywhere else.

When stderr is a log file or a CI pipe, a bar draws nothing until it ends, and a job that
runs for minutes looks dead. `LiveProgress` then prints one plain line every `every`
seconds from a timer thread — phase, done/total, rates, elapsed — so a log shows the job
is alive even while one long step (loading a model, a large prefill) runs. On a terminal
it is a transient rich bar with the same fields.

    with LiveProgress("run bm25") as progress:
        progress.phase("loading model qwen2.5-0.5b")
        ...
        progress.update(done=3, total=20, detail="0.85 steps/s 41.2 tok/s")

A leaf module (no imports of ours), so every layer may use it: the CLI's commands, and
`models/loading.py` while it converts a GGUF file.
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["LiveProgress", "format_elapsed"]


def format_elapsed(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class LiveProgress:
    """Progress on stderr: a bar on a terminal, otherwise a plain line every `every` seconds.

    Args:
        label: what runs, first on every line ("run bm25").
        every: seconds between plain lines when stderr is not a terminal.
        stream: where to write (default sys.stderr); `terminal` decides the mode (default: stream.isatty()).
    """

    def __init__(self, label: str, every: float = 5.0, stream=None, terminal: bool | None = None):
        self.label, self.every = label, every
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._phase, self._done, self._total, self._detail = "starting", None, None, ""
        self._started = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = self._task = None

    def __enter__(self) -> LiveProgress:
        self._started = time.perf_counter()
        if self.terminal:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
            self._bar = Progress(*columns, console=Console(file=self.stream), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self._description(), total=None, detail="")
        else:
            self._thread = threading.Thread(target=self._tick, name="dossier-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def phase(self, text: str) -> None:
        """What is running now ("loading model X", "episodes"); shown at once in plain mode.

        A new phase starts without counts: the previous phase's done/total and rates are cleared.
        """
        self._phase, self._done, self._total, self._detail = text, None, None, ""
        if self._bar is not None:
            self._bar.update(self._task, description=self._description(), completed=0, total=None, detail="")
        elif self._thread is not None:
            self._print()

    def update(self, done: int | None = None, total: int | None = None, detail: str | None = None) -> None:
        """New counts and rates; plain mode prints them at the next tick."""
        if done is not None:
            self._done = done
        if total is not None:
            self._total = total
        if detail is not None:
            self._detail = detail
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done or 0, total=self._total, detail=self._detail)

    def line(self) -> str:
        """The plain progress line as of now: `run bm25: episodes 3/20, 0.85 steps/s, elapsed 1m05s`."""
        head = f"{self.label}: {self._phase}"
        if self._total is not None:
            head += f" {self._done or 0}/{self._total}"
        parts = [head, self._detail] if self._detail else [head]
        parts.append(f"elapsed {format_elapsed(time.perf_counter() - self._started)}")
        return ", ".join(parts)

    def _description(self) -> str:
        return f"{self.label}: {self._phase}"

    def _print(self) -> None:
        print(self.line(), file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._print()
