"""Progress for logs (tools/progress.py): plain lines on a timer when stderr is not a terminal."""

import io
import time

from tools.progress import LiveProgress, format_elapsed


def test_plain_lines_keep_coming_while_one_long_step_runs():
    stream = io.StringIO()

    def wait_for(prefix: str, count: int) -> list[str]:  # a long step with no callback: the timer still prints
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = [line for line in stream.getvalue().splitlines() if line.startswith(prefix)]
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"fewer than {count} lines {prefix!r}:\n{stream.getvalue()}")

    with LiveProgress("run bm25", every=0.05, stream=stream, terminal=False) as live:
        live.phase("loading model qwen2.5-0.5b")  # printed at once, then again on every tick
        wait_for("run bm25: loading model qwen2.5-0.5b, elapsed ", 3)
        live.phase("episodes")
        live.update(done=3, total=20, detail="0.85 steps/s")
        wait_for("run bm25: episodes 3/20, 0.85 steps/s, elapsed ", 1)


def test_no_plain_lines_on_a_terminal_and_none_after_exit():
    stream = io.StringIO()
    with LiveProgress("ingest", every=0.02, stream=stream, terminal=True) as live:
        live.update(done=1, total=2)
    time.sleep(0.05)
    assert "ingest:" not in stream.getvalue()  # a transient rich bar instead
    plain = io.StringIO()
    with LiveProgress("ingest", every=0.02, stream=plain, terminal=False):
        pass
    written = plain.getvalue()
    time.sleep(0.08)
    assert plain.getvalue() == written  # the timer thread stopped with the block


def test_elapsed_reads_as_a_person_would_write_it():
    assert [format_elapsed(s) for s in (42, 185, 3725)] == ["42s", "3m05s", "1h02m"]
