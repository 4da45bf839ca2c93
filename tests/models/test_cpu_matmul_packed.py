"""bfloat16 CPU linears on a weight packed once for oneDNN (models/cpu_matmul.py): the same bits as F.linear."""

import pytest
import torch
import torch.nn.functional as F

from models import cpu_matmul

pytestmark = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")),
    reason="torch without oneDNN linear packing")


@pytest.fixture(autouse=True)
def plenty_of_memory(monkeypatch):
    monkeypatch.setattr(cpu_matmul, "_available_memory", lambda: (8 << 30, 16 << 30))
    monkeypatch.setattr(cpu_matmul, "_unpackable", [])


@pytest.mark.parametrize("shape", [(1, 96), (8, 96), (83, 96), (2, 7, 96)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_bf16_linear_gives_f_linears_bits(shape, with_bias):
    torch.manual_seed(0)
    weight = torch.randn(160, 96, dtype=torch.bfloat16)
    bias = torch.randn(160, dtype=torch.bfloat16) if with_bias else None
    x = torch.randn(*shape, dtype=torch.bfloat16)
    with torch.inference_mode():
        out = cpu_matmul.linear(x, weight, bias)
    assert getattr(weight, "_dossier_packed", None) is not None  # it took the packed path
    assert torch.equal(out, F.linear(x, weight, bias))


def test_the_packing_is_kept_and_redone_after_an_in_place_change():
    torch.manual_seed(0)
    weight = torch.randn(64, 32, dtype=torch.bfloat16)
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    before = cpu_matmul.packed_bytes()
    with torch.inference_mode():
        cpu_matmul.linear(x, weight)
    packed = weight._dossier_packed[1]
    with torch.inference_mode():
        cpu_matmul.linear(x, weight)
    assert weight._dossier_packed[1] is packed and cpu_matmul.packed_bytes() == before + weight.nbytes
    with torch.no_grad():
        weight.mul_(2)  # an in-place change (a merged adapter, a training step)
    with torch.inference_mode():
        out = cpu_matmul.linear(x, weight)
    assert weight._dossier_packed[1] is not packed and torch.equal(out, F.linear(x, weight))
    assert cpu_matmul.packed_bytes() == before + weight.nbytes  # a re-pack replaces, it does not add


def test_no_packing_when_it_would_leave_under_a_quarter_of_memory(monkeypatch):
    weight = torch.randn(64, 32, dtype=torch.bfloat16)
    monkeypatch.setattr(cpu_matmul, "_available_memory", lambda: (4 << 30, 16 << 30))  # 25 % left: the bound
    with torch.inference_mode():
        out = cpu_matmul.linear(torch.randn(2, 32, dtype=torch.bfloat16), weight)
    assert getattr(weight, "_dossier_packed", None) is None and out.dtype == torch.bfloat16


def test_autograd_and_float32_never_pack():
    weight = torch.randn(64, 32, dtype=torch.bfloat16, requires_grad=True)
    cpu_matmul.linear(torch.randn(2, 32, dtype=torch.bfloat16), weight).sum().backward()
    assert weight.grad is not None and getattr(weight, "_dossier_packed", None) is None
    plain = torch.randn(64, 32)
    with torch.inference_mode():
        cpu_matmul.linear(torch.randn(2, 32), plain)
    assert getattr(plain, "_dossier_packed", None) is None


def test_a_refused_weight_is_decided_once_not_at_every_call(monkeypatch):
    """The memory check reads /proc/meminfo once per weight: a refused weight stays on F.linear without re-reading."""
    reads = []
    monkeypatch.setattr(cpu_matmul, "_available_memory", lambda: reads.append(1) or (1 << 30, 16 << 30))
    weight = torch.randn(64, 32, dtype=torch.bfloat16)
    x = torch.randn(2, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        outs = [cpu_matmul.linear(x, weight) for _ in range(3)]
    assert len(reads) == 1 and all(torch.equal(out, F.linear(x, weight)) for out in outs)
