"""hypothesis-generated random (always valid) configurations, forward + all gradients."""
import pytest
import torch

from conftest import Cfg, check_cfg

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def configs(draw, max_hw=9, max_c=4):
    """Only valid configurations: output_padding < max(stride, dilation) per dimension and
    padding small enough for an output of at least 1x1."""
    groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
    cin = groups * draw(st.integers(1, max_c))
    cout = groups * draw(st.integers(1, max_c))
    N = draw(st.integers(1, 3))
    H, W = draw(st.integers(1, max_hw)), draw(st.integers(1, max_hw))
    k = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    s = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    d = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    op = tuple(draw(st.integers(0, max(si, di) - 1)) for si, di in zip(s, d))
    pad = []
    for n, kk, ss, dd, o in zip((H, W), k, s, d, op):
        max_p = ((n - 1) * ss + dd * (kk - 1) + o) // 2
        pad.append(draw(st.integers(0, max_p)))
    cfg = Cfg(N, cin, cout, H, W, k=k, stride=s, padding=tuple(pad), output_padding=op,
              dilation=d, groups=groups, bias=draw(st.booleans()))
    assert cfg.valid(), cfg
    return cfg


@settings(max_examples=60, deadline=None)
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1))
def test_random_configs_cpu_fp64(cfg, seed):
    torch.manual_seed(seed)
    check_cfg(cfg, torch.float64, "cpu")


@settings(max_examples=30, deadline=None)
@given(cfg=configs(max_hw=12, max_c=6), seed=st.integers(0, 2**31 - 1))
def test_random_configs_cpu_fp32(cfg, seed):
    torch.manual_seed(seed)
    check_cfg(cfg, torch.float32, "cpu")


@settings(max_examples=20, deadline=None)
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from([torch.bfloat16, torch.float16]))
def test_random_configs_cpu_half(cfg, seed, dtype):
    torch.manual_seed(seed)
    check_cfg(cfg, dtype, "cpu")


@pytest.mark.cuda
@settings(max_examples=150, deadline=None)
@given(cfg=configs(max_hw=16, max_c=8), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from([torch.float64, torch.float32, torch.float16, torch.bfloat16]))
def test_random_configs_cuda(cfg, seed, dtype):
    torch.manual_seed(seed)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        check_cfg(cfg, dtype, "cuda")
