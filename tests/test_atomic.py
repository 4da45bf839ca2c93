"""tools/atomic.py: concurrent writers of one path never collide, readers never see half a file."""

import os
import threading
from pathlib import Path

import pytest

from tools.atomic import atomic_path, atomic_write, write_bytes_atomic, write_json_atomic, write_text_atomic

SIZE = 1 << 18  # 256 KiB: several write() calls, so a shared temporary file would interleave them
ROUNDS = 150


def test_two_concurrent_writers_of_one_path_do_not_collide(tmp_path):
    target = tmp_path / "state.bin"
    contents = {name: bytes([name]) * SIZE for name in (1, 2)}
    start, errors, torn = threading.Barrier(3), [], []

    def writer(name: int) -> None:
        start.wait()
        try:
            for _ in range(ROUNDS):
                with atomic_write(target, "wb") as fh:
                    for offset in range(0, SIZE, 1 << 14):
                        fh.write(contents[name][offset:offset + (1 << 14)])
        except Exception as err:  # a fixed temporary name: the other writer's replace took our file away
            errors.append(repr(err))

    def reader() -> None:
        start.wait()
        while any(t.is_alive() for t in writers):
            if target.exists():
                seen = target.read_bytes()
                if seen not in contents.values():
                    torn.append((len(seen), set(seen)))

    writers = [threading.Thread(target=writer, args=(name,)) for name in contents]
    watcher = threading.Thread(target=reader)
    for thread in (*writers, watcher):
        thread.start()
    for thread in (*writers, watcher):
        thread.join()
    assert not errors, f"writers failed: {errors[:3]}"
    assert not torn, f"a reader saw {len(torn)} torn files, e.g. {torn[0][0]} bytes of values {torn[0][1]}"
    assert target.read_bytes() in contents.values()
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"], "temporary files were left behind"


def test_an_error_inside_the_block_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "predictions.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="half way"):
        with atomic_write(target, "w") as fh:
            fh.write("new, half")
            raise RuntimeError("half way")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]


def test_variants_write_what_they_are_given_with_ordinary_permissions(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "héllo\n")
    write_bytes_atomic(tmp_path / "b.bin", b"\x00\xff")
    write_json_atomic(tmp_path / "c.json", {"ü": 1}, ensure_ascii=False, indent=1)
    with atomic_path(tmp_path / "d.png") as tmp:  # a writer that wants a file name
        assert tmp.parent == tmp_path and tmp.name.startswith(".d.png.")
        Path(tmp).write_bytes(b"PNG")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert (tmp_path / "c.json").read_text(encoding="utf-8") == '{\n "ü": 1\n}'
    assert (tmp_path / "d.png").read_bytes() == b"PNG"
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open(path, "w") gives under this umask, not tempfile's private 0o600
    for name in ("a.txt", "b.bin", "c.json", "d.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == plain.stat().st_mode & 0o777, name


def test_a_folder_is_built_aside_and_swapped_in_and_a_failed_build_keeps_the_old(tmp_path):
    from tools.atomic import atomic_folder

    index = tmp_path / "index"
    index.mkdir()
    (index / "old.npy").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_folder(index) as staging:
            (staging / "half.npy").write_text("half")
            raise RuntimeError("the build failed")
    assert [p.name for p in index.iterdir()] == ["old.npy"]
    first, second = atomic_folder(index), atomic_folder(index)
    one, two = first.__enter__(), second.__enter__()  # two builders at once: two distinct folders
    assert one != two and one.parent == two.parent == tmp_path
    (one / "a.npy").write_text("a")
    (two / "b.npy").write_text("b")
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert [p.name for p in index.iterdir()] in (["a.npy"], ["b.npy"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"], "staging folders were left behind"
