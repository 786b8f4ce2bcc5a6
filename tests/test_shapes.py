"""The benchmark-suite shapes.

CPU: every shape scaled down (batch, channels and spatial size) so that the float64 CPU
reference and the CPU kernels stay fast; forward + all three gradients.

CUDA: the full-size shapes, forward in every dtype (float32 with and without TF32), and the
backward on a smaller batch. The reference for these is torch's conv_transpose2d on float64
*CUDA* tensors (a float64 CPU reference of the full shapes takes minutes); it is float64
arithmetic by torch, independent of convt2d.
"""
import pytest
import torch

from conftest import Cfg, check_cfg, dtype_id, CPU_DTYPES

BENCH = [
    Cfg(64, 64, 128, 128, 256, k=(3, 5), bias=False, name="seedA"),
    Cfg(8, 64, 64, 512, 512, k=(3, 7), bias=False, name="seedB"),
    Cfg(16, 32, 64, 64, 128, k=3, stride=5, padding=1, dilation=2, bias=False, name="seedC"),
    Cfg(16, 32, 64, 128, 256, k=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1),
        groups=4, bias=False, name="seedD"),
    Cfg(16, 256, 128, 64, 64, k=2, stride=2, bias=True, name="unet"),
    Cfg(128, 256, 128, 16, 16, k=4, stride=2, padding=1, bias=False, name="dcgan"),
    Cfg(1, 512, 256, 128, 128, k=3, stride=2, padding=1, output_padding=1, bias=False,
        name="vae"),
]
BENCH_IDS = [c.name for c in BENCH]


def cpu_scaled(c: Cfg) -> Cfg:
    """Batch <= 2, channels / 8 (kept divisible by groups), spatial / 8 (at least 4)."""
    g = c.groups
    cin = max(g, (c.Cin // 8) // g * g)
    cout = max(g, (c.Cout // 8) // g * g)
    return c.scaled(N=min(c.N, 2), Cin=cin, Cout=cout, H=max(4, c.H // 8), W=max(4, c.W // 8))


def all_valid():
    for c in BENCH:
        assert c.valid(), c.name
        assert cpu_scaled(c).valid(), c.name


all_valid()


@pytest.mark.parametrize("cfg", BENCH, ids=BENCH_IDS)
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=dtype_id)
def test_bench_shapes_cpu_scaled(cfg, dtype):
    check_cfg(cpu_scaled(cfg), dtype, "cpu", what=f"{cfg.name} ")


@pytest.mark.parametrize("cfg", BENCH, ids=BENCH_IDS)
def test_bench_shapes_cpu_scaled_unbatched_fp64(cfg):
    """The same scaled shapes with a batch of 1 (one image), forward and backward."""
    check_cfg(cpu_scaled(cfg).scaled(N=1), torch.float64, "cpu", what=f"{cfg.name} ")


# ------------------------------------------------------------------------------------ CUDA

CUDA_FWD = [(torch.float32, True), (torch.float32, False), (torch.float16, None),
            (torch.bfloat16, None)]


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", BENCH, ids=BENCH_IDS)
@pytest.mark.parametrize("dtype,tf32", CUDA_FWD,
                         ids=["float32-tf32", "float32-notf32", "float16", "bfloat16"])
def test_bench_shapes_cuda_full_forward(cfg, dtype, tf32):
    flags = {} if tf32 is None else {"allow_tf32": tf32}
    with torch.backends.cudnn.flags(enabled=True, **flags):
        check_cfg(cfg, dtype, "cuda", backward=False, ref_device="cuda", what=f"{cfg.name} ")


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", BENCH, ids=BENCH_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=dtype_id)
def test_bench_shapes_cuda_backward_small_batch(cfg, dtype):
    """Full channels and spatial size, batch cut to N/8 (at least 1): forward + grads."""
    c = cfg.scaled(N=max(1, cfg.N // 8))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        check_cfg(c, dtype, "cuda", ref_device="cuda", what=f"{cfg.name} ")
