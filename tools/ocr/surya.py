"""surya backend: surya-ocr in a worker process with hard timeouts, from local checkpoints only.

surya fetches its detector from an S3 bucket and runs recognition as a VLM behind
`llama-server` (surya 2) unless pointed at local files; offline it fails after a connection
error or hangs for minutes waiting for a server. So the backend is available only when
local checkpoints are configured, through surya's own environment variables:

    DETECTOR_MODEL_CHECKPOINT      local folder of the text-line detector
    and one recognition source:
    SURYA_GGUF_LOCAL_MODEL_PATH + SURYA_GGUF_LOCAL_MMPROJ_PATH   (surya 2; llama-server from
                                   LLAMA_CPP_BINARY or PATH)
    SURYA_INFERENCE_URL            a recognition server already running (surya 2)
    FOUNDATION_MODEL_CHECKPOINT or RECOGNITION_MODEL_CHECKPOINT   local folder (surya 0.17)

plus Dossier's: DOSSIER_SURYA_PYTHON (an interpreter that has surya; default this one),
DOSSIER_SURYA_STARTUP_TIMEOUT_S (default 300) and DOSSIER_SURYA_PAGE_TIMEOUT_S (default 120).

The worker (`surya_worker.py`) loads the models once and reads pages one at a time. Every
wait on it is bounded: past the timeout the worker is stopped (SIGTERM so surya can stop its
server, then SIGKILL) and the page fails with an `OcrError`; the next page starts a fresh
worker. Downloads are disabled in the worker (HF offline, S3 pointed at a closed local port).
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tools.errors import DossierError, MissingDependencyError
from tools.ocr.base import OcrBackend, OcrError, OcrResult, empty_result
from tools.ocr.layout import core_box, reading_order, split_line

__all__ = ["SuryaBackend", "SuryaConfig"]

INSTALL = "pip install surya-ocr"
_RECOGNITION_DIRS = ("FOUNDATION_MODEL_CHECKPOINT", "RECOGNITION_MODEL_CHECKPOINT")


@dataclass(slots=True)
class SuryaConfig:
    """How to start the surya worker and how long to wait for it."""

    python: str = sys.executable  # interpreter that has surya installed
    startup_timeout_s: float = 300.0  # loading models (and starting llama-server) may take this long
    page_timeout_s: float = 120.0  # one page may take this long
    command: list[str] | None = None  # replaces [python, surya_worker.py] (tests use a scripted worker)
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the worker

    def __post_init__(self):
        if self.startup_timeout_s <= 0 or self.page_timeout_s <= 0:
            raise DossierError(f"surya timeouts must be positive, got startup {self.startup_timeout_s} "
                               f"and page {self.page_timeout_s}")

    @classmethod
    def from_env(cls) -> SuryaConfig:
        """Read DOSSIER_SURYA_PYTHON, DOSSIER_SURYA_STARTUP_TIMEOUT_S and DOSSIER_SURYA_PAGE_TIMEOUT_S."""
        def number(name: str, default: float) -> float:
            raw = os.environ.get(name)
            try:
                return float(raw) if raw else default
            except ValueError:
                raise DossierError(f"{name}={raw!r} is not a number of seconds") from None

        return cls(python=os.environ.get("DOSSIER_SURYA_PYTHON") or sys.executable,
                   startup_timeout_s=number("DOSSIER_SURYA_STARTUP_TIMEOUT_S", 300.0),
                   page_timeout_s=number("DOSSIER_SURYA_PAGE_TIMEOUT_S", 120.0))


def _local(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value and Path(value).exists() else None


def checkpoint_problem() -> str | None:
    """What is missing from the local-checkpoint configuration, or None when it is complete."""
    if _local("DETECTOR_MODEL_CHECKPOINT") is None:
        return "DETECTOR_MODEL_CHECKPOINT must name a local folder with surya's text detector"
    if os.environ.get("SURYA_INFERENCE_URL") or any(_local(n) for n in _RECOGNITION_DIRS):
        return None
    if _local("SURYA_GGUF_LOCAL_MODEL_PATH") and _local("SURYA_GGUF_LOCAL_MMPROJ_PATH"):
        binary = os.environ.get("LLAMA_CPP_BINARY") or "llama-server"
        if Path(binary).is_file() or shutil.which(binary):
            return None
        return f"llama-server not found (set LLAMA_CPP_BINARY to the binary; {binary!r} is not on PATH)"
    return ("no local recognition model: set SURYA_GGUF_LOCAL_MODEL_PATH and SURYA_GGUF_LOCAL_MMPROJ_PATH "
            "(surya 2), SURYA_INFERENCE_URL, or FOUNDATION_MODEL_CHECKPOINT (surya 0.17)")


class SuryaBackend(OcrBackend):
    """surya-ocr through a persistent worker process with hard timeouts.

    Args:
        config: worker command and timeouts (default: `SuryaConfig.from_env()`).
    """

    name = "surya"
    install_hint = INSTALL

    def __init__(self, config: SuryaConfig | None = None):
        self.config = config or SuryaConfig.from_env()
        if self.config.command is None:
            reason = self.unavailable_reason()
            if reason:
                raise MissingDependencyError(reason)
        self._proc: subprocess.Popen | None = None
        self._replies: queue.Queue = queue.Queue()
        self._tmp = tempfile.TemporaryDirectory(prefix="dossier-surya-")

    @classmethod
    def unavailable_reason(cls) -> str | None:
        python = os.environ.get("DOSSIER_SURYA_PYTHON")
        if python:
            if not Path(python).is_file():
                return f"DOSSIER_SURYA_PYTHON={python!r} is not a file; point it at a Python that has surya"
        elif importlib.util.find_spec("surya") is None:
            return f"surya-ocr is not installed; install it with: {INSTALL} (and configure local checkpoints)"
        problem = checkpoint_problem()
        return None if problem is None else f"surya needs local checkpoints: {problem}"

    # -- worker lifecycle ----------------------------------------------------------------------
    def _start(self) -> None:
        command = self.config.command or [self.config.python, str(Path(__file__).with_name("surya_worker.py"))]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DISABLE_TQDM": "true",
               "S3_BASE_URL": "http://127.0.0.1:9",  # a closed local port: a download attempt fails at once
               "SURYA_INFERENCE_STARTUP_TIMEOUT": str(self.config.startup_timeout_s), **self.config.env}
        try:
            self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
        except OSError as err:
            raise OcrError(f"cannot start the surya worker ({command[0]}): {err}") from None
        self._replies = queue.Queue()
        threading.Thread(target=_pump, args=(self._proc.stdout, self._replies), daemon=True).start()
        reply = self._wait(self.config.startup_timeout_s, "load its models")
        if not reply.get("ready"):
            self.close()
            raise OcrError(f"surya worker failed to start: {reply.get('error', reply)}")

    def _wait(self, timeout_s: float, doing: str) -> dict:
        try:
            reply = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise OcrError(f"surya did not {doing} within {timeout_s:.0f} s; the worker was stopped") from None
        if reply is None:  # the worker's stdout closed
            self.close()
            raise OcrError(f"the surya worker exited while trying to {doing}")
        return reply

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def __del__(self):
        try:
            self.close()
            self._tmp.cleanup()
        except Exception:  # interpreter shutdown: best effort only
            pass

    # -- OCR -------------------------------------------------------------------------------------
    def read(self, image: Image.Image) -> OcrResult:
        rgb = image.convert("RGB")
        width, height = rgb.size
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        path = Path(self._tmp.name) / f"page-{time.monotonic_ns()}.png"
        rgb.save(path)
        try:
            try:
                self._proc.stdin.write(json.dumps({"image": str(path)}) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self.close()
                raise OcrError("the surya worker stopped accepting pages") from None
            reply = self._wait(self.config.page_timeout_s, f"read a {width}×{height} page")
        finally:
            path.unlink(missing_ok=True)
        if "error" in reply:
            raise OcrError(f"surya failed on a {width}×{height} page: {reply['error']}")
        return lines_to_result(reply.get("lines", []), width, height)


def _pump(stream, replies: queue.Queue) -> None:
    """Forward the worker's JSON lines to the queue; None marks the end of its output."""
    for raw in stream:
        raw = raw.strip()
        if not raw.startswith("{"):
            continue  # libraries print to stdout; only our JSON lines count
        try:
            replies.put(json.loads(raw))
        except json.JSONDecodeError:
            continue
    replies.put(None)


def lines_to_result(lines: list[dict], width: int, height: int) -> OcrResult:
    """Words with boxes in reading order from the worker's text lines."""
    usable = [line for line in lines if line.get("text", "").strip() and line.get("bbox")]
    if not usable:
        return empty_result("surya", width, height)
    cores = []
    for line in usable:
        polygon = line.get("polygon")
        cores.append(core_box(np.array(polygon, np.float32)) if polygon and len(polygon) == 4
                     else np.array(line["bbox"], np.float32))
    words, boxes, confidences, numbers = [], [], [], []
    for block_no, block in enumerate(reading_order(np.stack(cores))):
        for line_no, row in enumerate(block):
            word_no = 0
            for i in row:
                line = usable[i]
                pieces = [(w["text"], np.array(w["bbox"], np.float32), float(w.get("confidence", 1.0)))
                          for w in line.get("words") or [] if w.get("bbox") and w.get("text", "").strip()]
                if not pieces:
                    pieces = [(w, b, float(line.get("confidence", 1.0))) for w, b in split_line(line["text"], line["bbox"])]
                for text, box, score in pieces:
                    words.append(text)
                    boxes.append(box)
                    confidences.append(score)
                    numbers.append((block_no, line_no, word_no))
                    word_no += 1
    return OcrResult("surya", width, height, words, np.stack(boxes).astype(np.float32),
                     np.clip(np.array(confidences, np.float32), 0, 1), np.array(numbers, np.int32))
