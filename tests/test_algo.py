"""CONVT2D_ALGO, the one override of the planner's choices (docs/design.md, "Forcing an
algorithm"), on any machine: parsing and its errors, and the CPU's baseline-ISA kernels forced.
(The CUDA algorithms forced one by one are in test_cuda.py.)"""
import pytest
import torch

import convt2d
from conftest import Cfg, check


def _fwd_cpu():
    x, w, b = Cfg(1, 4, 6, 5, 5, k=3, stride=2).make(torch.float32, "cpu")
    return convt2d.forward(x, w, b, 2, 0, 0, 1, 1)


@pytest.mark.parametrize("spec,names", [
    ("gpu:fast", ["pass 'gpu'", "fwd|dgrad|wgrad|bwd|cpu"]),
    ("dgrad:patch_gemm", ["dgrad algorithm 'patch_gemm'", "implicit_gemm_halo"]),
    ("fwd:nonsense", ["fwd algorithm 'nonsense'", "narrow_output", "patch_gemm"]),
    ("cpu:avx512", ["cpu algorithm 'avx512'", "avx2|baseline"]),
    ("warp=9", ["option 'warp'", "loader"]),
    ("loader=dma", ["value of loader 'dma'", "cpasync|tma"]),
    ("direct_nt=3", ["value of direct_nt '3'", "2|4|8"]),
    ("k_splits=0", ["k_splits value '0'", "1..64"]),
    ("k_splits=65", ["k_splits value '65'", "1..64"]),
    ("k_splits=2x", ["k_splits value '2x'", "1..64"]),
    ("patch_gemm", ["item 'patch_gemm'", "pass:algorithm"]),
])
def test_unknown_names_are_rejected_with_the_valid_ones(spec, names, monkeypatch):
    monkeypatch.setenv("CONVT2D_ALGO", spec)
    with pytest.raises(RuntimeError) as e:
        _fwd_cpu()
    msg = str(e.value)
    assert "CONVT2D_ALGO" in msg and all(n in msg for n in names), msg
    monkeypatch.delenv("CONVT2D_ALGO")
    _fwd_cpu()  # a bad value is not remembered


def test_items_spaces_and_empty_items(monkeypatch):
    monkeypatch.setenv("CONVT2D_ALGO", " fwd:patch_gemm , ,cpu:baseline,loader=tma,k_splits=64 ")
    _fwd_cpu()
    monkeypatch.setenv("CONVT2D_ALGO", "")
    _fwd_cpu()


_CFGS = [
    Cfg(2, 8, 12, 7, 9, k=3, stride=2, padding=1, output_padding=1, bias=True),
    Cfg(1, 12, 6, 5, 6, k=(2, 5), stride=(1, 3), dilation=(2, 1), groups=3),
    Cfg(3, 5, 7, 4, 4, k=4, stride=2, padding=1, bias=False),
]


@pytest.mark.parametrize("algo", ["cpu:baseline", None], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("cfg", _CFGS, ids=lambda c: c.id())
def test_cpu_kernels_forced(cfg, dtype, algo, monkeypatch):
    """The baseline-ISA CPU kernels (what a CPU without AVX2 runs), forced, and the default,
    forward and all gradients against float64."""
    if algo:
        monkeypatch.setenv("CONVT2D_ALGO", algo)
    else:
        monkeypatch.delenv("CONVT2D_ALGO", raising=False)
    x, w, b = cfg.make(dtype, "cpu")
    check(x, w, b, cfg.kwargs(), what=f"{algo} ")
