"""Does a worker see the driver's corpus? Same node, a shared filesystem, or a copy with the same index.

Each worker fingerprints the corpus's search index (file names and sizes, and the bytes of
the small files) and names the filesystem under it; the driver compares them with its own
before any episode runs, so a missing or different copy on one node fails at start with the
node's name instead of as wrong search results later.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

__all__ = ["corpus_facts", "describe_placement"]

SHARED_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "ceph", "glusterfs", "beegfs", "9p", "fuse")
_SMALL = 1 << 20  # files up to this many bytes are hashed whole; larger ones by size


def _filesystem(path: Path) -> str:
    """The type of the filesystem holding `path` (from /proc/mounts; 'unknown' elsewhere)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    target = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def corpus_facts(corpus: str | Path | None) -> dict:
    """Host, process and corpus fingerprint of this process (a worker or the driver)."""
    facts = {"host": socket.gethostname(), "pid": os.getpid()}
    if corpus is None:
        return facts
    root = Path(corpus)
    index = root / "index"
    if not index.is_dir():
        return facts | {"corpus": str(root), "found": False}
    digest = hashlib.sha256()
    for path in sorted(p for p in index.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(index)}:{size}\n".encode())
        if size <= _SMALL:
            digest.update(path.read_bytes())
    fs = _filesystem(root)
    return facts | {"corpus": str(root), "found": True, "fingerprint": digest.hexdigest()[:16], "filesystem": fs,
                    "shared": fs.split(".")[0] in SHARED_FILESYSTEMS}


def describe_placement(driver: dict, workers: list[dict]) -> tuple[str, list[str]]:
    """One line saying how the workers reach the corpus, and the problems (worker by worker) if any."""
    if "corpus" not in driver:
        return "no corpus", []
    problems, ways = [], []
    for i, worker in enumerate(workers):
        where = f"worker {i} on {worker['host']} (pid {worker['pid']})"
        if not worker.get("found"):
            problems.append(f"{where} has no corpus index at {worker.get('corpus')}: put the corpus on a shared "
                            f"filesystem or copy it to the same path on {worker['host']}")
        elif worker["fingerprint"] != driver.get("fingerprint"):
            problems.append(f"{where} has a different corpus index at {worker['corpus']} (fingerprint "
                            f"{worker['fingerprint']}, the driver's {driver.get('fingerprint')}): copy the driver's "
                            "corpus there again")
        elif worker["host"] == driver["host"]:
            ways.append("the driver's own directory (same node)")
        elif worker["shared"]:
            ways.append(f"a shared filesystem ({worker['filesystem']})")
        else:
            ways.append(f"a copy with the same index on {worker['host']} ({worker['filesystem']})")
    counts = {way: ways.count(way) for way in ways}
    summary = "; ".join(f"{n} worker{'s' if n > 1 else ''} read {way}" for way, n in counts.items())
    return f"corpus {driver['corpus']}: {summary or 'no worker reads it'}", problems
