"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

Every write goes to a temporary file with a unique name in the target's own folder (same
filesystem, so the final rename is atomic), is flushed and fsynced, then `os.replace`d onto the
target. Unique names matter: two processes writing the same path (two `dossier ingest` runs on
one corpus, a resumed run beside a live one) each write their own temporary file, and the last
replace wins with a complete file; a fixed `NAME.tmp` let them write into one file together.
An error inside the block removes the temporary file and leaves the target as it was.

    with atomic_write(path, "w") as fh:       # a stream
        for record in records:
            fh.write(json.dumps(record) + "\\n")
    with atomic_path(path) as tmp:            # for writers that want a file name (PIL, PyMuPDF, shutil)
        image.save(tmp, format="PNG")
    write_text_atomic(path, text); write_bytes_atomic(path, data); write_json_atomic(path, obj, indent=2)
    with atomic_folder(index_dir) as staging:  # a whole folder (an index), built aside, then swapped in
        build_into(staging)

The new file gets the permissions an ordinary `open(path, "w")` would give (0o666 less the umask),
not tempfile's private 0o600. A leaf module (no imports of ours).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_folder", "atomic_path", "atomic_write", "write_bytes_atomic", "write_json_atomic",
           "write_text_atomic"]


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once at import, before any thread of ours writes
_FILE_MODE = 0o666 & ~_UMASK


def _temporary(path: Path) -> tuple[int, Path]:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, _FILE_MODE)
    return fd, Path(name)


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; on a clean exit fsync it and replace `path` with it.

    Args:
        path: the file to (re)write; its folder must exist.
        mode: "w" (text) or "wb" (bytes).
        encoding: text encoding (ignored for "wb").

    Yields:
        The open file object.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode {mode!r}: use 'w' (text) or 'wb' (bytes)")
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, mode, encoding=None if mode == "wb" else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary file name beside `path` for a writer that takes a name; fsynced and moved onto `path`.

    The temporary file exists (empty) when the block starts; the writer overwrites it.
    """
    path = Path(path)
    fd, tmp = _temporary(path)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """`Path.write_text`, atomically (see the module docstring)."""
    with atomic_write(path, "w", encoding) as fh:
        fh.write(text)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """`Path.write_bytes`, atomically."""
    with atomic_write(path, "wb") as fh:
        fh.write(data)


def write_json_atomic(path: str | os.PathLike, obj, **dumps) -> None:
    """`json.dumps(obj, **dumps)` written atomically as UTF-8 (pass `indent`, `ensure_ascii`, ... as json takes them)."""
    write_text_atomic(path, json.dumps(obj, **dumps))


@contextmanager
def atomic_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """A new empty folder with a unique name beside `folder`, to build into; on a clean exit it becomes `folder`.

    A folder cannot be replaced in one step: the old `folder` is removed, then the new one renamed onto its
    name. When another writer's rename lands between the two, its folder is kept and ours is discarded
    (both were built from the same input). An error inside the block removes the new folder and leaves
    `folder` as it was.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    staging.chmod(0o777 & ~_UMASK)  # mkdtemp's is 0o700
    try:
        yield staging
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
