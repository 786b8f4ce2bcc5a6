"""CUDA-only behaviour: build, devices, streams, CUDA graphs, determinism, 64-bit indexing."""
import re

import pytest
import torch
import torch.nn.functional as F

import convt2d
from conftest import Cfg, assert_close, check, check_cfg, ours, poison, reference

pytestmark = pytest.mark.cuda

CFG = Cfg(4, 32, 48, 13, 17, k=(3, 4), stride=(2, 3), padding=(1, 1), output_padding=(1, 2),
          dilation=(1, 2), groups=2, bias=True)


def _tf32_off():
    return torch.backends.cudnn.flags(enabled=True, allow_tf32=False)


def _algo(monkeypatch, spec):
    """Force the planner's choices for the rest of the test: CONVT2D_ALGO=spec (comma-separated
    `pass:algorithm` and `option=value` items, e.g. "fwd:patch_gemm,bwd:strided"); None or "":
    unset, the planner's heuristics."""
    if spec:
        monkeypatch.setenv("CONVT2D_ALGO", spec)
    else:
        monkeypatch.delenv("CONVT2D_ALGO", raising=False)


def _algos(*items):
    """One CONVT2D_ALGO string from items (None / "" items left out)."""
    return ",".join(i for i in items if i)


# The halo / 3xFP16 tests below use small shapes, whose grids fill under half the GPU: the
# planner would run them split-K on the two-block kernel (igemm_k_splits). They pin one K
# range so that the kernel they are about runs.
_NO_SPLIT = "k_splits=1"


def _ran(pass_):
    """The algorithm the planner ran in the latest call of `pass_` (fwd, dgrad, wgrad, bwd),
    process-wide."""
    return convt2d.last_algorithms().get(pass_)


def test_build_has_cuda_kernels():
    assert convt2d.cuda_available(), "convt2d was built without CUDA kernels"


def test_runs_on_the_tensors_device():
    """Tensors on the last GPU (cuda:1 when there are two or more) while the current device
    is cuda:0: outputs and gradients land on the tensors' device and are right."""
    dev = torch.device("cuda", torch.cuda.device_count() - 1)
    x, w, b = CFG.make(torch.float32, dev)
    with torch.cuda.device(0), _tf32_off():
        out, grads = check(x, w, b, CFG.kwargs())
    assert out.device == dev and all(g.device == dev for g in grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_default_stream(dtype):
    """The kernels must run on the current stream: on a side stream, a long GPU sleep and then
    a copy into x precede the call; a kernel on any other stream would read the old x."""
    x, w, b = CFG.make(dtype, "cuda")
    x_new = torch.randn_like(x, dtype=torch.float32).to(dtype)
    gy = torch.randn(CFG.out_shape(), device="cuda").to(dtype)
    ref_out, ref_grads = reference(x_new, w, b, CFG.kwargs(), gy)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with _tf32_off():
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)  # tens of milliseconds of GPU time on s
            x.copy_(x_new)
            out, grads = ours(x, w, b, CFG.kwargs(), gy)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        assert_close(out, ref_out, dtype, "cuda", "side-stream forward")
        for n, g, r in zip(("gx", "gw", "gb"), grads, ref_grads):
            assert_close(g, r, dtype, "cuda", f"side-stream {n}")


# (tensor-core kernel, direct kernel) shapes: Cin, Cout, k, stride
# (64, 128, 3, 1): fp32 with TF32 off runs it on 3xFP16, whose loader flags the inf, so the
# 3xTF32 kernel reruns the product.
_INF_SHAPES = [(64, 64, 3, 1), (64, 64, 4, 2), (8, 8, 3, 2), (64, 128, 3, 1)]


@pytest.mark.parametrize("shape", _INF_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mode", ["fp32-ieee", "fp32-tf32", "bf16"])
def test_inf_input_gives_inf_like_torch(shape, mode):
    """One +inf input pixel with positive weights: the outputs it reaches are +inf, every other
    output finite (no NaN), as in torch's float64 result. 3xTF32 once made inf*small terms NaN."""
    cin, cout, k, s = shape
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    x = torch.randn(2, cin, 9, 11, dtype=torch.float64)
    x[1, cin // 2, 4, 5] = float("inf")
    w = torch.rand(cin, cout, k, k, dtype=torch.float64) * 0.5 + 0.5
    xc, wc = x.to(dtype).cuda(), w.to(dtype).cuda()
    ref = F.conv_transpose2d(xc.double().cpu(), wc.double().cpu(), stride=s)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=(mode == "fp32-tf32")):
        out = convt2d.forward(xc, wc, stride=s)
        assert not out.isnan().any(), "NaN in the output"
        assert torch.equal(out.isinf().cpu(), ref.isinf()) and (out[out.isinf()] > 0).all()
        fin = ref.isfinite()
        assert_close(out[fin.cuda()], ref[fin].cuda(), dtype, "cuda", "finite outputs")


@pytest.mark.parametrize("cout", [64, 128], ids=lambda c: f"cout{c}")
def test_near_max_finite_input_stays_finite_ieee(cout):
    """fp32 with TF32 off: an input just below FLT_MAX (which TF32 rounding takes to inf) still
    gives the finite fp32 result (3xTF32 splits it with a truncated big part; with 128 outputs
    3xFP16 flags it as out of its range and 3xTF32 reruns the product)."""
    x = torch.randn(2, 64, 5, 6) * 0.1
    x[1, 3, 2, 4] = 3.4028e38
    w = torch.full((64, cout, 1, 1), 0.25)
    ref = F.conv_transpose2d(x.double(), w.double())
    with _tf32_off():
        out = convt2d.forward(x.cuda(), w.cuda())
        assert out.isfinite().all(), "non-finite output for a finite input"
        assert_close(out, ref.cuda(), torch.float32, "cuda", "near-FLT_MAX input")
        # the image without the huge pixel, on its own (its error would be hidden above)
        assert_close(out[:1], ref[:1].cuda(), torch.float32, "cuda", "other image")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_cuda_graph_capture_and_replay(dtype):
    kw = CFG.kwargs()
    x, w, b = CFG.make(dtype, "cuda")
    gy = torch.randn(CFG.out_shape(), device="cuda").to(dtype)
    args = (list(CFG.stride), list(CFG.padding), list(CFG.output_padding), CFG.groups,
            list(CFG.dilation))
    with _tf32_off():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up outside the capture
            for _ in range(2):
                convt2d.forward(x, w, b, **kw)
                torch.ops.convt2d.backward(gy, x, w, *args, [True, True, True])
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = convt2d.forward(x, w, b, **kw)
            gi, gw, gb = torch.ops.convt2d.backward(gy, x, w, *args, [True, True, True])
        for it in range(3):
            nx, nw, nb = CFG.make(dtype, "cuda")
            ngy = torch.randn(CFG.out_shape(), device="cuda").to(dtype)
            x.copy_(nx)
            w.copy_(nw)
            b.copy_(nb)
            gy.copy_(ngy)
            g.replay()
            torch.cuda.synchronize()
            ref_out, ref_grads = reference(nx, nw, nb, kw, ngy)
            assert_close(out, ref_out, dtype, "cuda", f"replay {it} forward")
            for n, t, r in zip(("gi", "gw", "gb"), (gi, gw, gb), ref_grads):
                assert_close(t, r, dtype, "cuda", f"replay {it} {n}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_deterministic_gradients(dtype):
    """torch.use_deterministic_algorithms(True): two backward runs are bitwise equal."""
    cfg = Cfg(8, 64, 64, 32, 32, k=3, stride=2, padding=1, output_padding=1, bias=True)
    x, w, b = cfg.make(dtype, "cuda")
    gy = torch.randn(cfg.out_shape(), device="cuda").to(dtype)
    with _tf32_off():  # strict float32 tolerance below
        torch.use_deterministic_algorithms(True)
        try:
            runs = [ours(x, w, b, cfg.kwargs(), gy) for _ in range(2)]
        finally:
            torch.use_deterministic_algorithms(False)
        (o1, g1), (o2, g2) = runs
        assert torch.equal(o1, o2)
        for n, a, c in zip(("grad_input", "grad_weight", "grad_bias"), g1, g2):
            assert torch.equal(a, c), f"{n} differs between two deterministic runs"
        _, ref_grads = reference(x, w, b, cfg.kwargs(), gy)
        for n, g, r in zip(("grad_input", "grad_weight", "grad_bias"), g1, ref_grads):
            assert_close(g, r, dtype, "cuda", f"deterministic {n}")


def test_poison_helper_self_test():
    """Self-test of conftest.poison: after it, fresh allocations of any size hold NaN, even
    with the cache full of freed blocks that held other data."""
    from conftest import poison
    junk = [torch.randn(n, device="cuda") for n in (100, 5000, 300_000, 2_000_000, 9_000_000)]
    keep = [torch.randn(n, device="cuda") for n in (7, 70_000, 3_000_000)]
    del junk
    sizes = (1, 256, 100, 5000, 70_000, 300_000, 2_000_000, 9_000_000, 15_000_000)
    poison("cuda", 4 * sum(sizes))
    fresh = [torch.empty(n, device="cuda") for n in sizes]  # all first: checks allocate too
    for n, t in zip(sizes, fresh):
        assert torch.isnan(t).all().item(), f"torch.empty({n}) after poison() holds non-NaN"
    del keep


# ------------------------------------------------------------------------ 64-bit indexing

def _big_enough(gib):
    return torch.cuda.is_available() and \
        torch.cuda.get_device_properties(0).total_memory >= gib * 2**30


def _rows_ref(x, w, r0, r1):
    """Reference output rows [r0, r1) of conv_transpose2d(x, w) (stride 1, no padding), from
    the input rows that reach them, in float64."""
    kh = w.shape[2]
    a, bnd = max(0, r0 - kh + 1), min(x.shape[2], r1)
    part = F.conv_transpose2d(x[:, :, a:bnd].double(), w.double())
    return part[:, :, r0 - a:r1 - a]


BIG = dict(N=1, Cin=1, Cout=2, H=32768, W=32768, k=3)  # output 2 x 32770^2 > 2^31 elements


@pytest.mark.slow
@pytest.mark.skipif(not _big_enough(20), reason="needs >= 20 GB of GPU memory")
def test_large_output_beyond_int32_forward():
    x = torch.randn(BIG["N"], BIG["Cin"], BIG["H"], BIG["W"], device="cuda",
                    dtype=torch.bfloat16)
    w = torch.randn(BIG["Cin"], BIG["Cout"], BIG["k"], BIG["k"], device="cuda",
                    dtype=torch.bfloat16)
    out = convt2d.forward(x, w)
    ho = BIG["H"] + BIG["k"] - 1
    assert out.shape == (1, 2, ho, ho) and out.numel() > 2**31
    assert out.dtype == torch.bfloat16
    for r0, r1 in [(0, 6), (ho // 2 - 3, ho // 2 + 3), (ho - 24, ho)]:
        ref = _rows_ref(x, w, r0, r1)
        for c in (0, 1):  # channel 1's last rows lie beyond flat index 2^31
            assert_close(out[:, c:c + 1, r0:r1], ref[:, c:c + 1], torch.bfloat16, "cuda",
                         f"rows {r0}:{r1} channel {c}")
    # the very last elements (flat index ~ 2^31 + 2.6e5)
    assert_close(out[0, 1, -1, -64:], _rows_ref(x, w, ho - 1, ho)[0, 1, 0, -64:],
                 torch.bfloat16, "cuda", "last elements")


@pytest.mark.slow
@pytest.mark.skipif(not _big_enough(40), reason="needs >= 40 GB of GPU memory")
def test_large_output_beyond_int32_backward():
    H = BIG["H"]
    ho = H + BIG["k"] - 1
    x = torch.randn(1, 1, H, H, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1, 2, 3, 3, device="cuda", dtype=torch.bfloat16)
    gy = torch.randn(1, 2, ho, ho, device="cuda", dtype=torch.bfloat16)
    gi, gw, _ = torch.ops.convt2d.backward(gy, x, w, [1, 1], [0, 0], [0, 0], 1, [1, 1],
                                           [True, True, False])
    assert gi.shape == x.shape and gw.shape == w.shape
    # grad_input = conv2d(gy, w): rows [r0, r1) need gy rows [r0, r1 + 2)
    for r0, r1 in [(0, 8), (H - 8, H)]:
        ref = F.conv2d(gy[:, :, r0:r1 + 2].double(), w.double())
        assert_close(gi[:, :, r0:r1], ref, torch.bfloat16, "cuda", f"grad_input rows {r0}:{r1}")
    # grad_weight[0, co, ky, kx] = sum x[iy, ix] * gy[co, iy + ky, ix + kx], in float64 chunks
    ref_gw = torch.zeros(1, 2, 3, 3, dtype=torch.float64, device="cuda")
    step = 2048
    for r in range(0, H, step):
        xs = x[0, 0, r:r + step].double()
        n = xs.shape[0]
        for co in range(2):
            gs = gy[0, co, r:r + n + 2].double()
            for ky in range(3):
                for kx in range(3):
                    ref_gw[0, co, ky, kx] += (xs * gs[ky:ky + n, kx:kx + H]).sum()
    assert_close(gw, ref_gw, torch.bfloat16, "cuda", "grad_weight")


# Shapes for both tensor-core kernels on Hopper: the warp-specialised 256-row tile
# (implicit_gemm_wgmma_ws) and the two-block kernel (implicit_gemm_wgmma), forward and
# grad_input (the dgrad GEMM runs on the same kernels; CONVT2D_ALGO forces both passes).
# Partial M and N tiles, several phases, taps missing from some phases, groups, dilation,
# bias.
_WS_CFGS = [
    Cfg(2, 64, 128, 9, 37, k=(3, 5)),
    Cfg(3, 128, 96, 7, 11, k=4, stride=2, padding=1, bias=True),
    Cfg(1, 64, 256, 6, 7, k=3, stride=2, padding=1, output_padding=1, bias=False),
    Cfg(2, 128, 160, 5, 9, k=(2, 3), stride=(2, 1), dilation=(1, 2), groups=2),
    Cfg(2, 64, 72, 13, 5, k=3, stride=3, padding=(0, 1)),
    Cfg(2, 96, 64, 11, 13, k=(3, 2), stride=(1, 2), padding=(1, 0), bias=True),
]


_WS_ALGOS = {
    "0": "fwd:implicit_gemm_wgmma,dgrad:implicit_gemm_wgmma",
    "1": "fwd:implicit_gemm_wgmma_ws,dgrad:implicit_gemm_wgmma_ws",
    "1-cpasync": "fwd:implicit_gemm_wgmma_ws,dgrad:implicit_gemm_wgmma_ws,loader=cpasync",
}


@pytest.mark.parametrize("ws", ["0", "1", "1-cpasync"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _WS_CFGS, ids=lambda c: c.id())
def test_tensor_core_kernels_forced(cfg, dtype, layout, ws, monkeypatch):
    # "1": the warp-specialised kernel with its TMA loader where that applies (all these
    # rows except the groups=2 row's grad_input, Kc 80: a channel tile would cross into
    # the next group, so it loads with cp.async); "1-cpasync": loader=cpasync. "0": the
    # two-block kernel. (Elsewhere than on an H100 the planner's choice among the others runs.)
    _algo(monkeypatch, _WS_ALGOS[ws])
    x, w, b = cfg.make(dtype, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    check(x, w, b, cfg.kwargs(), what=f"ws={ws} {layout} ")


# The Hopper halo kernel (implicit_gemm/igemm_halo_sm90.cu): GEMM rows widened by the tap columns' reach, tap
# columns as shifted views of one staged halo. Shapes: tiles spanning image rows and images
# (narrow W), the largest reach (16: kw 17, or kw 9 at dilation 2), padding that crops taps
# (source column offset > 0), output_padding, partial M, N and K tiles (Nc 40 / 136, Kc 96),
# groups, row strides (forward phases; grad_input with stride 1 along x only), a phase with
# no tap columns (bias only), bias. Forward and both gradients; grad_input also runs on the
# halo kernel where its GEMM qualifies (Cout/groups * size >= 128 bytes).
_HALO_ALGO = "fwd:implicit_gemm_halo,dgrad:implicit_gemm_halo"
_HALO_CFGS = [
    Cfg(2, 64, 128, 9, 37, k=(3, 5)),
    Cfg(3, 64, 40, 7, 5, k=(2, 3), padding=(0, 1), bias=True),
    Cfg(2, 96, 136, 6, 11, k=(3, 9), padding=(1, 3), output_padding=(0, 1), dilation=(1, 2)),
    Cfg(2, 128, 64, 5, 7, k=(3, 17), padding=(1, 9), bias=False),
    Cfg(2, 64, 64, 12, 14, k=3, padding=(1, 3)),
    Cfg(2, 128, 192, 8, 13, k=(3, 4), groups=2),
    Cfg(2, 64, 96, 7, 10, k=(3, 5), stride=(2, 1), padding=(1, 2), bias=True),
    Cfg(2, 128, 64, 6, 6, k=4, stride=2, padding=1),
    Cfg(2, 64, 72, 5, 6, k=(2, 3), stride=(1, 2), dilation=(1, 2), bias=True),
]


@pytest.mark.parametrize("loader", ["tma", "cpasync"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _HALO_CFGS, ids=lambda c: c.id())
def test_halo_kernel_forced(cfg, dtype, layout, loader, monkeypatch):
    # loader "tma": the TMA loader where it applies (all of these shapes but the groups=2 row
    # in 16-bit, Kc 64 = one channel tile: that applies too); "cpasync": loader=cpasync.
    _algo(monkeypatch, _algos(_HALO_ALGO, "loader=cpasync" if loader == "cpasync" else None))
    x, w, b = cfg.make(dtype, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    check(x, w, b, cfg.kwargs(), what=f"halo {layout} ")


# 3xTF32 also takes GEMMs with one tap column per phase (k=2 stride 2, 1x1 convolutions).
_HALO_IEEE_CFGS = _HALO_CFGS + [
    Cfg(3, 64, 72, 9, 11, k=2, stride=2, bias=True),
    Cfg(2, 128, 64, 7, 13, k=1, bias=False),
    Cfg(2, 64, 136, 5, 9, k=(1, 3), stride=(2, 1), padding=(0, 1)),
]


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _HALO_IEEE_CFGS, ids=lambda c: c.id())
def test_halo_kernel_forced_ieee(cfg, layout, monkeypatch):
    """fp32 with TF32 off on the halo kernel: 3xTF32 (split halo and weight halves, per-item
    partial sums added in IEEE fp32) within the fp32 tolerance."""
    _algo(monkeypatch, _HALO_ALGO)
    x, w, b = cfg.make(torch.float32, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with _tf32_off():
        check(x, w, b, cfg.kwargs(), what=f"halo 3xTF32 {layout} ")
        if torch.cuda.get_device_capability() == (9, 0):  # and it ran there, not a fallback
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            assert any(_split_halo(n) for n in names), names
            assert _ran("fwd") == "implicit_gemm_halo", convt2d.last_algorithms()


def _split_halo(name):
    """The 3xTF32 halo kernel: HaloTraits<float, BM, BN, SB, true>, mangled or demangled."""
    return "tc_halo_kernel" in name and bool(re.search(
        r"HaloTraitsIfLi\d+ELi\d+ELi\d+ELb1E|HaloTraits<float, \d+, \d+, \d+, true(, (true|false))*>",
        name))


@pytest.mark.parametrize("cout", [64, 128], ids=lambda c: f"cout{c}")
def test_overflowing_product_ieee_gives_inf_not_nan(cout):
    """fp32 with TF32 off: x = 2^20 + 768 times a weight of 2^120 overflows to +inf. The big
    halves' product is inf while the cross term x_small * w_big is -2^128 = -inf, so summing
    them together would give NaN: the weight flag must send the items to the careful sum
    (cross terms dropped where big*big is not finite). Everything else stays accurate."""
    x = torch.randn(2, 64, 9, 21, dtype=torch.float64)
    x[1, 7, 4, 5] = 2.0**20 + 768
    w = torch.randn(64, cout, 3, 3, dtype=torch.float64) * 0.1
    w[7, 5, 1, 1] = 2.0**120
    ref = F.conv_transpose2d(x.float().double(), w.float().double(), padding=1).cuda()
    with _tf32_off():
        out = convt2d.forward(x.float().cuda(), w.float().cuda(), padding=1)
    assert not out.isnan().any(), "NaN in the output"
    big = ref.abs() > torch.finfo(torch.float32).max
    assert big.sum().item() == 1 and out[big].item() == float("inf"), out[big]
    assert out[~big].isfinite().all()
    assert_close(out[~big], ref[~big], torch.float32, "cuda", "other outputs")


@pytest.mark.parametrize("cout", [64, 128], ids=lambda c: f"cout{c}")
def test_huge_weight_ieee_stays_accurate(cout):
    """fp32 with TF32 off: one weight of 2^61 (flagged: the halo kernel's careful sum, big*big
    and cross terms apart) leaves every output channel at fp32 accuracy, the channel it feeds
    and the others, each compared on its own."""
    x = torch.randn(2, 64, 9, 21, dtype=torch.float64)
    w = torch.randn(64, cout, 3, 5, dtype=torch.float64) * 0.1
    w[7, 5, 1, 2] = 2.0**61
    ref = F.conv_transpose2d(x.to(torch.float32).double(), w.to(torch.float32).double(), padding=1)
    with _tf32_off():
        out = convt2d.forward(x.float().cuda(), w.float().cuda(), padding=1)
    ref = ref.cuda()
    keep = torch.ones(cout, dtype=torch.bool, device="cuda")
    keep[5] = False
    assert_close(out[:, 5], ref[:, 5], torch.float32, "cuda", "channel fed by the huge weight")
    assert_close(out[:, keep], ref[:, keep], torch.float32, "cuda", "other channels")


# 3xFP16 (fp32 with TF32 off; forward GEMMs of more than 64 columns, channels in whole 8s):
# the halo kernel with fp16 halves, each item scaled by its largest |x|, each weight column by
# its largest |w|. The _HALO_IEEE_CFGS rows it takes, and partial channel / column tiles.
_F16X3_CFGS = [c for c in _HALO_IEEE_CFGS
               if c.Cout // c.groups > 64 and (c.Cin // c.groups) % 8 == 0] + [
    Cfg(2, 200, 200, 6, 9, k=3, padding=1, bias=True),
    Cfg(1, 72, 130, 5, 40, k=(2, 5), dilation=(1, 2)),
    Cfg(2, 136, 72, 7, 6, k=(3, 4), stride=(1, 2), padding=(1, 1), output_padding=(0, 1),
        bias=True),
]


def _f16x3_halo(name):
    """The 3xFP16 halo kernel: HaloTraits<__half, BM, BN, SB, true[, persistent]>, mangled or
    demangled."""
    return "tc_halo_kernel" in name and bool(re.search(
        r"HaloTraitsI6__halfLi\d+ELi\d+ELi\d+ELb1E|"
        r"HaloTraits<__half, \d+, \d+, \d+, true(, (true|false))*>",
        name))


def _f16x3_ran(fn):
    """Whether fn ran the 3xFP16 kernel (sm 9.0 only: elsewhere there is no wgmma)."""
    if torch.cuda.get_device_capability() != (9, 0):
        return True
    names = _kernel_names(fn)
    return any(_f16x3_halo(n) for n in names)


@pytest.mark.parametrize("wtma", [None, "loader=cpasync"], ids=["wtma", "wcpasync"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _F16X3_CFGS, ids=lambda c: c.id())
def test_f16x3_kernel(cfg, layout, wtma, monkeypatch):
    """fp32 with TF32 off: the default forward runs 3xFP16 on these shapes (asserted), within
    the fp32 tolerance; CONVT2D_ALGO=f16x3=off gives 3xTF32 alone. loader=cpasync copies the
    weights with cp.async instead of TMA."""
    _algo(monkeypatch, _algos(_NO_SPLIT, wtma))
    x, w, b = cfg.make(torch.float32, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with _tf32_off():
        check(x, w, b, cfg.kwargs(), what=f"3xFP16 {layout} ")
        assert _f16x3_ran(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
        if torch.cuda.get_device_capability() == (9, 0):
            # the weights came through TMA (kTma) unless turned off
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            f16 = [n for n in names if _f16x3_halo(n)]
            assert all((re.search(_HALO_TMA_TRUE, n) is not None) == (wtma is None) for n in f16), f16
            # NCHW x: the kernel read it itself (then no ungated channels-last copy) or the
            # copy came first; never with cp.async weights.
            nchw = any(re.search(_HALO_NCHW, n) for n in f16)
            assert not (nchw and (layout != "nchw" or wtma is not None)), f16
            assert _copied_x(names) == (layout == "nchw" and not nchw), names


def test_f16x3_off_switch(monkeypatch):
    _algo(monkeypatch, _algos(_NO_SPLIT, "f16x3=off"))
    cfg = _F16X3_CFGS[0]
    x, w, b = cfg.make(torch.float32, "cuda")
    with _tf32_off():
        check(x, w, b, cfg.kwargs(), what="3xTF32 only ")
        if torch.cuda.get_device_capability() == (9, 0):
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            assert not any(_f16x3_halo(n) for n in names), names
            assert any(_split_halo(n) for n in names), names


# More tiles than two per SM: the persistent 3xFP16 kernel's blocks take several tiles each
# (and the second column tile is partial: 136 or 130 output channels).
_F16X3_BIG = [
    Cfg(6, 64, 136, 40, 61, k=3, bias=True),
    Cfg(8, 64, 130, 30, 33, k=4, stride=2, padding=1),
]


@pytest.mark.parametrize("wtma", [None, "loader=cpasync"], ids=["wtma", "wcpasync"])
@pytest.mark.parametrize("persist", [None, "f16x3_persist=on"], ids=["blocks", "persistent"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _F16X3_BIG, ids=lambda c: c.id())
def test_f16x3_persistent_many_tiles(cfg, layout, persist, wtma, monkeypatch):
    """Images 10^-3..10^4 apart in magnitude, so the item scales change from tile to tile of
    one block; each image within fp32 accuracy of the float64 reference, output poisoned.
    By default a block takes one tile; CONVT2D_ALGO=f16x3_persist=on forces the persistent
    kernel, whose blocks take several."""
    _algo(monkeypatch, _algos(persist, wtma))
    x, w, b = cfg.make(torch.float32, "cpu")
    x = x * torch.logspace(-3, 4, cfg.N).view(-1, 1, 1, 1).float()
    ref = F.conv_transpose2d(x.double(), w.double(), None if b is None else b.double(),
                             **cfg.kwargs())
    xc = x.cuda()
    if layout == "channels_last":
        xc = xc.contiguous(memory_format=torch.channels_last)
    wc, bc = w.cuda(), None if b is None else b.cuda()
    fn = lambda: convt2d.forward(xc, wc, bc, **cfg.kwargs())  # noqa: E731
    with _tf32_off():
        poison("cuda", ref.numel() * 4)
        out = fn().cpu()
        assert _f16x3_ran(fn)
    for n in range(cfg.N):
        assert_close(out[n], ref[n], torch.float32, "cpu", f"image {n}")


@pytest.mark.parametrize("cfg", [_F16X3_BIG[0], Cfg(6, 64, 136, 40, 64, k=3, bias=True)],
                         ids=lambda c: c.id())
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_f16x3_fallback_many_tiles(layout, cfg):
    """One input value beyond the 3xFP16 range (1e30 > 2^75) sends the whole product to the
    gated 3xTF32 launch, which is looped (fewer blocks than its tiles): every output within
    fp32 accuracy of the float64 reference, output poisoned. With NCHW x and W % 4 == 0 the
    3xFP16 kernel read x itself, so the fallback's channels-last copy is the gated one."""
    x, w, b = cfg.make(torch.float32, "cpu")
    x[2, 5, 7, 9] = 1e30
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), **cfg.kwargs())
    xc = x.cuda()
    if layout == "channels_last":
        xc = xc.contiguous(memory_format=torch.channels_last)
    with _tf32_off():
        poison("cuda", ref.numel() * 4)
        fn = lambda: convt2d.forward(xc, w.cuda(), b.cuda(), **cfg.kwargs())  # noqa: E731
        out = fn().cpu()
        if torch.cuda.get_device_capability() == (9, 0):
            # the fallback is the looped 3xTF32 kernel (HaloTraits<float, ..., true, false, true>)
            names = _kernel_names(fn)
            if layout == "nchw" and cfg.W % 4 == 0:
                # the 3xFP16 kernel read NCHW x; the fallback's channels-last copy was gated
                assert any(re.search(_HALO_NCHW, n) for n in names), names
                assert any("nchw_to_nhwc_if_kernel" in n for n in names), names
                assert not _copied_x(names), names
            assert any(re.search(r"HaloTraitsIfLi\d+ELi\d+ELi\d+ELb1ELb0ELb1E|"
                                 r"HaloTraits<float, \d+, \d+, \d+, true, false, true>", n)
                       for n in names), names
    assert out.isfinite().all()
    for n in range(cfg.N):
        assert_close(out[n], ref[n], torch.float32, "cpu", f"image {n}")


@pytest.mark.parametrize("mag", [1e-12, 1.0, 1e12], ids=lambda m: f"x{m:g}")
def test_f16x3_wide_range(mag, monkeypatch):
    """3xFP16 scales: x at 1e-12 or 1e12 (unscaled fp16 would flush or overflow), one image
    all zeros, and weight columns from 1e-6 to 1e6 (one scale for the whole weight would
    flush the small columns). Every (image, output channel) within fp32 accuracy."""
    _algo(monkeypatch, _NO_SPLIT)
    cin, cout = 64, 96
    x = torch.randn(3, cin, 7, 19, dtype=torch.float64) * mag
    x[2] = 0
    w = torch.randn(cin, cout, 3, 5, dtype=torch.float64) / 30
    w *= torch.logspace(-6, 6, cout, dtype=torch.float64).view(1, cout, 1, 1)
    xf, wf = x.float(), w.float()
    ref = F.conv_transpose2d(xf.double(), wf.double(), padding=(1, 2)).cuda()
    with _tf32_off():
        fn = lambda: convt2d.forward(xf.cuda(), wf.cuda(), padding=(1, 2))  # noqa: E731
        out = fn()
        assert _f16x3_ran(fn)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    for n in range(2):
        for co in range(0, cout, 5):
            assert_close(out[n, co], ref[n, co], torch.float32, "cuda", f"image {n} channel {co}")


# The 3xFP16 kernel reading NCHW x itself (W % 4 == 0): rows led so that a quad's source
# columns start at a multiple of 4 (lead 0..3) and widened to a multiple of 4, stride phases,
# dilation, groups, partial channel tiles, a batch of many tiles.
_F16X3_NCHW = [
    Cfg(2, 64, 128, 9, 20, k=(3, 5)),                     # lead 0, rows already 4-aligned
    Cfg(2, 64, 96, 7, 16, k=3, padding=1, bias=True),      # lead 3
    Cfg(3, 72, 130, 6, 12, k=(2, 3), bias=True),           # lead 2
    Cfg(2, 64, 136, 5, 8, k=4, stride=2, padding=1),       # phases of 2 taps, lead 0 / 3
    Cfg(1, 136, 200, 6, 28, k=(3, 3), dilation=(2, 3), padding=(1, 2)),
    Cfg(2, 128, 256, 5, 12, k=3, stride=(1, 2), output_padding=(0, 1), groups=2, bias=True),
    Cfg(5, 64, 136, 21, 64, k=(3, 5), padding=(1, 1), bias=True),
    Cfg(2, 64, 136, 5, 12, k=(3, 17), padding=(1, 9)),     # the largest reach (16)
    Cfg(2, 64, 128, 6, 12, k=3, padding=(1, 3)),           # source columns start past 0
    Cfg(2, 64, 136, 5, 8, k=2, stride=3, bias=True),       # a phase with no tap columns
]


@pytest.mark.parametrize("cfg", _F16X3_NCHW, ids=lambda c: c.id())
def test_f16x3_nchw(cfg, monkeypatch):
    """fp32 with TF32 off, NCHW x: the 3xFP16 kernel reads x itself (asserted on an H100:
    its kNchw instance ran and no ungated channels-last copy), images 10^-3..10^3 apart in
    magnitude, output poisoned, each image within fp32 accuracy of the float64 reference;
    f16x3_nchw=on (wherever it can; by default only where its rows need no widening),
    then f16x3_nchw=off (the copy first). (fwd:implicit_gemm_halo: the halo kernel wherever it
    applies; by default the router sends some of these shapes to other kernels.)"""
    x, w, b = cfg.make(torch.float32, "cpu")
    x = x * torch.logspace(-3, 3, cfg.N).view(-1, 1, 1, 1).float()
    ref = F.conv_transpose2d(x.double(), w.double(), None if b is None else b.double(),
                             **cfg.kwargs())
    xc, wc, bc = x.cuda(), w.cuda(), None if b is None else b.cuda()
    fn = lambda: convt2d.forward(xc, wc, bc, **cfg.kwargs())  # noqa: E731
    for off in (None, "off"):
        _algo(monkeypatch, _algos(_HALO_ALGO, "f16x3_nchw=" + ("on" if off is None else off)))
        with _tf32_off():
            poison("cuda", ref.numel() * 4)
            out = fn().cpu()
            if torch.cuda.get_device_capability() == (9, 0):
                names = _kernel_names(fn)
                f16 = [n for n in names if _f16x3_halo(n)]
                assert f16 and all((re.search(_HALO_NCHW, n) is not None) == (off is None)
                                   for n in f16), names
                assert _copied_x(names) == (off is not None), names
                assert _ran("fwd") == "implicit_gemm_halo", convt2d.last_algorithms()
        for n in range(cfg.N):
            assert_close(out[n], ref[n], torch.float32, "cpu", f"image {n} (NCHW off: {off})")


@pytest.mark.parametrize("cfg,nchw", [
    (_F16X3_NCHW[0], True),
    (Cfg(1, 64, 128, 8, 32, k=3, stride=2, padding=1, output_padding=1), True),
    (_F16X3_NCHW[1], False),
], ids=["rows4", "widened33to36", "widened18to24"])
def test_f16x3_nchw_default(cfg, nchw, monkeypatch):
    """By default the 3xFP16 kernel reads NCHW x itself where widening its GEMM rows adds at
    most 1/8 (k=(3, 5) at W 20: none; k=3 stride 2 at W 32: 33 -> 36 rows in one phase),
    else the copy comes first (k=3 padding 1 at W 16: 18 -> 24); all within fp32 accuracy."""
    _algo(monkeypatch, _NO_SPLIT)
    x, w, b = cfg.make(torch.float32, "cuda")
    with _tf32_off():
        check(x, w, b, cfg.kwargs(), backward=False, what="3xFP16 NCHW default ")
        if torch.cuda.get_device_capability() == (9, 0):
            fn = lambda: convt2d.forward(x, w, b, **cfg.kwargs())  # noqa: E731
            names = _kernel_names(fn)
            assert _f16x3_ran(fn), names
            assert any(re.search(_HALO_NCHW, n) for n in names) == nchw, names
            assert _copied_x(names) == (not nchw), names


@pytest.mark.parametrize("nchw", [None, "f16x3_nchw=on"], ids=["default", "forced"])
def test_f16x3_nchw_cropped_columns(nchw, monkeypatch):
    """Source columns that padding crops (they feed no output) but that a led / widened row
    of the NCHW-reading kernel still loads: 1e20 there (inside the 3xFP16 range, so no
    fallback) must not change the item scales. k=3 padding (1, 3) at W 32: lead 1, rows 30
    -> 32, columns 0 and 31 cropped."""
    _algo(monkeypatch, _algos(_NO_SPLIT, nchw))
    cfg = Cfg(2, 64, 128, 8, 32, k=3, padding=(1, 3))
    x, w, b = cfg.make(torch.float32, "cpu")
    x[:, :, :, 0] = 1e20
    x[:, :, :, 31] = -1e20
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), **cfg.kwargs())
    xc, wc, bc = x.cuda(), w.cuda(), b.cuda()
    fn = lambda: convt2d.forward(xc, wc, bc, **cfg.kwargs())  # noqa: E731
    with _tf32_off():
        poison("cuda", ref.numel() * 4)
        assert_close(fn().cpu(), ref, torch.float32, "cpu", "forward")
        if torch.cuda.get_device_capability() == (9, 0):
            names = _kernel_names(fn)
            assert any(re.search(_HALO_NCHW, n) for n in names), names


def test_f16x3_nchw_unaligned(monkeypatch):
    """NCHW x at an address that is not 16-byte aligned (a view one float into its storage)
    and x with W % 4 != 0: the channels-last copy first, results unchanged."""
    _algo(monkeypatch, _NO_SPLIT)
    cfg = Cfg(2, 64, 128, 6, 12, k=3, padding=1)
    x, w, b = cfg.make(torch.float32, "cpu")
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), **cfg.kwargs())
    buf = torch.empty(x.numel() + 1, device="cuda")
    xu = buf[1:].view(x.shape)
    xu.copy_(x.cuda())
    assert xu.is_contiguous() and xu.data_ptr() % 16 != 0
    x5 = torch.randn(2, 64, 6, 13)
    ref5 = F.conv_transpose2d(x5.double(), w.double(), b.double(), **cfg.kwargs())
    with _tf32_off():
        for xin, r in ((xu, ref), (x5.cuda(), ref5)):
            fn = lambda: convt2d.forward(xin, w.cuda(), b.cuda(), **cfg.kwargs())  # noqa: E731
            poison("cuda", r.numel() * 4)
            assert_close(fn().cpu(), r, torch.float32, "cpu", f"x {tuple(xin.shape)}")
            if torch.cuda.get_device_capability() == (9, 0):
                names = _kernel_names(fn)
                assert _f16x3_ran(fn) and _copied_x(names), names
                assert not any(re.search(_HALO_NCHW, n) for n in names), names


def _kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# The kernels' last template argument kTma = true, demangled or mangled.
_TMA_TRUE = r", (true|false), true>|ELb[01]ELb1EEEv"
# tc_halo_kernel<Traits, kChanOut, kTma, kNchw>: kTma = true; kTma and kNchw = 1 or 2 (NCHW x
# read by the kernel; 2: with masked quads).
_HALO_TMA_TRUE = r">, (true|false), true(, \d)?>|ELb[01]ELb1E(Li\dE)?EEv"
_HALO_NCHW = r">, (true|false), true, [12]>|ELb[01]ELb1ELi[12]EEEv"


def _copied_x(names):
    """Whether an ungated NCHW -> channels-last copy kernel ran (common/layout_kernels.cu)."""
    return any(re.search(r"nchw_to_nhwc(_c4|_vec)?_kernel", n) for n in names)


def _halo_tma(names):
    """(TMA, cp.async) launch counts of tc_halo_kernel<Traits, kChanOut, kTma> in names."""
    halo = [n for n in names if "tc_halo_kernel<" in n]
    tma = sum(re.search(_HALO_TMA_TRUE, n) is not None for n in halo)
    return tma, len(halo) - tma


def _ws_tma(names):
    """(TMA, cp.async) launch counts of tc_ws_kernel<Traits, kChanOut, kTma> in names."""
    ws = [n for n in names if "tc_ws_kernel<" in n]
    tma = sum(re.search(_TMA_TRUE, n) is not None for n in ws)
    return tma, len(ws) - tma


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_ws_kernel_tma_loader_where_it_applies(dtype, monkeypatch):
    """The warp-specialised kernel loads through TMA (im2col A, tiled B) on an H100, forward
    and grad_input (stride 2: the grad_input map walks its pixel window in steps of 2). It
    falls back to cp.async where a channel tile would cross into the next group (groups 2
    with Kc 96: 16-bit channel tiles are 64 wide, fp32 ones 32) and with loader=cpasync.
    Every result is checked against the float64 reference."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the warp-specialised kernel is built for sm_90a")
    dense = Cfg(3, 128, 192, 9, 11, k=4, stride=2, padding=1, bias=True)
    grouped = Cfg(2, 192, 256, 7, 9, k=3, stride=2, padding=1, groups=2)  # Kc 96 fwd, 128 dgrad
    fp32 = dtype == torch.float32
    for cfg, loader, want in [(dense, "tma", (2, 0)), (dense, "cpasync", (0, 2)),
                              (grouped, "tma", (2, 0) if fp32 else (1, 1))]:
        _algo(monkeypatch, _algos(_WS_ALGOS["1"],
                                  "loader=cpasync" if loader == "cpasync" else None))
        x, w, b = cfg.make(dtype, "cuda")
        x.requires_grad_(True)
        names = _kernel_names(
            lambda: convt2d.forward(x, w, b, **cfg.kwargs()).float().sum().backward())
        assert _ws_tma(names) == want, (cfg.id(), loader, names)
        assert _ran("fwd") == "implicit_gemm_wgmma_ws", convt2d.last_algorithms()
        check(x.detach(), w, b, cfg.kwargs(), what=f"loader={loader} ")


def test_tma_declines_tap_reach_beyond_im2col_offsets(monkeypatch):
    """A 4-D im2col copy takes tap offsets of 8 bits (0..255). Dilation 128 with 3 taps
    reaches 256 along x (the pixel-window corners, -128, still fit): the TMA loaders must
    decline, forward and grad_input, and the cp.async loader gives the right result."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TMA loaders are built for sm_90a")
    _algo(monkeypatch, _WS_ALGOS["1"])
    cfg = Cfg(1, 64, 128, 6, 300, k=(1, 3), padding=(0, 128), dilation=(1, 128), bias=False)
    x, w, b = cfg.make(torch.bfloat16, "cuda")
    x.requires_grad_(True)
    names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()).float().sum().backward())
    assert _ws_tma(names) == (0, 2), names
    assert _ran("fwd") == "implicit_gemm_wgmma_ws", convt2d.last_algorithms()
    check(x.detach(), w, b, cfg.kwargs(), what="reach 256 ")


def test_halo_kernel_is_the_implicit_gemms_default_where_it_applies(monkeypatch):
    """On an H100 (compute capability 9.0, sm_90a build) the implicit GEMM of a dense
    stride-1 layer with 64 channels runs its bf16 forward on the halo kernel and its bf16
    grad_input on the warp-specialised kernel's TMA loader (measured faster there, perf-log
    v5); TF32 and 3xTF32 run both on the halo kernel (where the planner does not split K:
    _NO_SPLIT). The forward's implicit GEMM is forced: for so small a layer the cost model
    may take the GEMM + col2im."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the halo kernel is built for sm_90a")
    _algo(monkeypatch, _algos(_NO_SPLIT, "fwd:implicit_gemm"))
    cfg = Cfg(2, 64, 64, 16, 40, k=(3, 5), bias=False)
    x, w, _ = cfg.make(torch.bfloat16, "cuda")
    x.requires_grad_(True)

    def step():
        convt2d.forward(x, w).sum().backward()

    names = _kernel_names(step)
    assert _halo_tma(names) == (1, 0), names
    assert _ws_tma(names) == (1, 0), names
    x32, w32 = x.detach().float().requires_grad_(True), w.float()
    names = _kernel_names(lambda: convt2d.forward(x32, w32).sum().backward())
    assert _halo_tma(names) == (2, 0), names
    _algo(monkeypatch, _algos(_NO_SPLIT, "fwd:implicit_gemm", "loader=cpasync"))
    names = _kernel_names(lambda: convt2d.forward(x32, w32).sum().backward())
    assert _halo_tma(names) == (0, 2), names
    _algo(monkeypatch, _algos(_NO_SPLIT, "fwd:implicit_gemm"))
    # fp32 with TF32 off: 3xTF32 on the halo kernel (the only wgmma 3xTF32 path).
    with _tf32_off():
        names = _kernel_names(lambda: convt2d.forward(x32, w32).sum().backward())
    assert sum(_split_halo(n) for n in names) == 2, names


# grad_weight on tensor cores (grad_weight/wgrad_tensor_core.cu): M = kh*kw*Cog mixes taps inside one tile, so
# these shapes put tile edges mid-tap (Cog 24, 40), leave partial N tiles (Cig 40, 136 > the
# 128-wide tile), use groups, strides, dilation, padding that crops taps, and a K
# (N*H*W pixels) long enough for many split-K slices with a short last one; 272 taps.
# Each runs on the
# tensor-core kernel and on the CUDA-core fallback (everything on CUDA cores: _V1_ALGO), in
# every dtype, fp32 with TF32 on and off (3xTF32).
_WGRAD_CFGS = [
    Cfg(4, 40, 24, 33, 29, k=3, stride=2, padding=1, output_padding=1, bias=False),
    Cfg(2, 136, 40, 17, 19, k=(2, 3), stride=(2, 1), dilation=(1, 2)),
    Cfg(3, 64, 32, 8, 9, k=5, stride=3, padding=2, groups=2),
    Cfg(5, 64, 128, 61, 59, k=(3, 5), bias=False),
    Cfg(2, 256, 128, 16, 16, k=4, stride=2, padding=1),
    Cfg(2, 16, 24, 5, 6, k=(16, 17), bias=False),
]


_V1_ALGO = "fwd:implicit_gemm_simt,dgrad:implicit_gemm_simt,wgrad:simt,bwd:strided"


@pytest.mark.parametrize("kernel", ["tc", "v1"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _WGRAD_CFGS, ids=lambda c: c.id())
def test_grad_weight_kernels(cfg, dtype, layout, kernel, monkeypatch):
    if kernel == "v1":
        _algo(monkeypatch, _V1_ALGO)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dtype != "fp32-ieee"):
        check(x, w, b, cfg.kwargs(), what=f"{kernel} {layout} {dtype} ")
        if kernel == "v1":  # the CUDA-core implicit GEMM takes every problem
            assert _ran("fwd") == "implicit_gemm_simt", convt2d.last_algorithms()


# grad_weight on wgmma (grad_weight/wgrad_tensor_core.cu kWg: 16-bit, x channels-last, compute capability 9.0 with
# an sm_90a build): every wgmma tile on the grad_weight shapes above plus partial tiles in
# both GEMM dimensions (Cin/groups = 72 of a 64 / 128 tile, taps * Cout/groups = 3 * 40 = 120
# of 256) and a split-K run over several images.
_WGRAD_WG_CFGS = _WGRAD_CFGS[:5] + [
    Cfg(3, 72, 40, 9, 11, k=(1, 3), stride=(1, 2), padding=(0, 1), bias=False),
    Cfg(6, 64, 64, 40, 44, k=3, stride=1, padding=1, bias=False),
]


def _wg_kernel(names):
    """tc_wgrad_kernel launches with the wgmma traits (8 x 1 warps, kWg = true)."""
    return [n for n in names if "tc_wgrad_kernel" in n and
            re.search(r"8, 1, (32|64), [0-9]+, false, true>|Li8ELi1ELi(32|64)ELi[0-9]ELb0ELb1EE", n)]


@pytest.mark.parametrize("tile", ["wg64", "wg128", "wg64k", "wg128k", "default"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("cfg", _WGRAD_WG_CFGS, ids=lambda c: c.id())
def test_grad_weight_wgmma(cfg, dtype, tile, monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma kernels run on compute capability 9.0")
    _algo(monkeypatch, _algos("wgrad:tensorop", "bwd:strided", "wgrad_x=copy",
                              None if tile == "default" else f"wgrad_tile={tile}"))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    x, w, b = cfg.make(dt, "cuda")
    k = cfg.kwargs()
    args = _op_args(k)
    gy = torch.randn(cfg.out_shape(), device="cuda", dtype=dt)
    names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                             [False, True, False]))
    if not any("tc_wgrad_kernel" in n for n in names):
        pytest.skip(f"not a tc_wgrad shape: {names}")
    assert _ran("bwd") == "strided", convt2d.last_algorithms()
    # The heuristic takes wgmma from 128 GEMM rows (taps * Cout/groups) up.
    if tile != "default" or w.shape[1] * w.shape[2] * w.shape[3] >= 128:
        assert _wg_kernel(names), names
    check(x, w, b, k, what=f"wgmma {tile} {dtype} ")


# grad_weight reading NCHW x K-major (grad_weight/wgrad_tensor_core.cu kXN: no channels-last copy of x) on every
# tile: H*W = 8 (a 32-pixel k-tile spans four images), 72 (k-tiles straddle images), a
# channel tail (Cin/groups = 40 of a 64 / 128-channel tile), groups, stride and padding.
_WGRAD_XN_CFGS = [
    Cfg(7, 16, 24, 2, 4, k=3, stride=1, padding=1),
    Cfg(3, 40, 24, 8, 9, k=3, stride=2, padding=1, output_padding=1),
    Cfg(2, 80, 64, 6, 12, k=(2, 3), stride=(2, 1), groups=2, bias=False),
]


@pytest.mark.parametrize("tile", ["narrow", "wide", "tall", "bigtall", "bigwide"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("cfg", _WGRAD_XN_CFGS, ids=lambda c: c.id())
def test_grad_weight_nchw_x(cfg, dtype, tile, monkeypatch):
    """NCHW x goes to grad_weight without a channels-last copy when asked (wgrad_x=nchw: one
    layout copy in the backward, grad_output's; wgrad_x=copy makes two) and every tile is right.
    The default picks it for 1x1 problems and few channels per group (the gather tests run
    it). wgrad:tensorop: the mma.sync kernel, not tc_wgrad_km (wgmma_nchw)."""
    base = _algos("wgrad:tensorop", f"wgrad_tile={tile}", "bwd:strided")
    _algo(monkeypatch, _algos(base, "wgrad_x=nchw"))
    dt = {"bf16": torch.bfloat16}.get(dtype, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    k = cfg.kwargs()
    args = _op_args(k)
    gy = torch.randn(cfg.out_shape(), device="cuda", dtype=dt)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dtype != "fp32-ieee"):
        def copies():
            names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                                     [False, True, False]))
            assert any("tc_wgrad_kernel" in n for n in names), names
            assert _ran("wgrad") == "tensorop", convt2d.last_algorithms()
            assert _ran("bwd") == "strided", convt2d.last_algorithms()
            return sum("nchw_to_nhwc" in n for n in names)
        _algo(monkeypatch, _algos(base, "wgrad_x=copy"))
        assert copies() == 2
        _algo(monkeypatch, _algos(base, "wgrad_x=nchw"))
        assert copies() == 1
        check(x, w, b, k, what=f"nchw x {tile} {dtype} ")


# grad_weight on wgmma from the NCHW tensors (grad_weight/wgrad_nchw_sm90.cu; fp32: 3xTF32 with TF32 off, TF32
# with CONVT2D_ALGO=wgrad:wgmma_nchw; at least 32 channels per group): row widths that are not whole
# 32-pixel tiles nor multiples of 4 (the padded-row copy), a channel tail in both GEMM
# dimensions (Cin 72 of two 64-ci tiles, Cout 96 / 40 of 64-co slabs), an odd item count
# (taps x slabs), vertical stride and dilation, groups, 1x1, a tap reach beyond the image,
# and strides along W (grad_out as stride-phase planes: whole planes, a ragged last plane,
# stride 3 with output padding, stride with dilation).
_WGRAD_KM_CFGS = [
    Cfg(2, 64, 128, 20, 70, k=(3, 5), bias=False),
    Cfg(3, 72, 96, 9, 33, k=3, stride=(2, 1), padding=1, dilation=(1, 2)),
    Cfg(2, 64, 128, 16, 64, k=(2, 3), groups=2, padding=(0, 1), bias=False),
    Cfg(3, 32, 32, 5, 4, k=1),
    Cfg(1, 32, 40, 6, 12, k=(7, 9), padding=(1, 3), dilation=2, bias=False),
    Cfg(4, 64, 64, 16, 16, k=4, stride=2, padding=1, bias=False),
    Cfg(2, 48, 32, 9, 11, k=3, stride=2, padding=1),
    Cfg(2, 32, 48, 7, 13, k=3, stride=(1, 3), padding=(1, 2), output_padding=(0, 1)),
    Cfg(2, 40, 32, 7, 10, k=3, stride=2, dilation=2, padding=2, bias=False),
]


@pytest.mark.parametrize("mode", ["fp32-ieee", "fp32"])
@pytest.mark.parametrize("cfg", _WGRAD_KM_CFGS, ids=lambda c: c.id())
def test_grad_weight_km(cfg, mode, monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma kernels run on compute capability 9.0")
    # (forced in both modes: on small layers the planner's cost model may prefer the direct
    # kernel for fp32 with TF32 off too)
    _algo(monkeypatch, "bwd:strided,wgrad:wgmma_nchw")
    x, w, b = cfg.make(torch.float32, "cuda")
    k = cfg.kwargs()
    args = _op_args(k)
    gy = torch.randn(cfg.out_shape(), device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=mode == "fp32"):
        names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                                 [False, True, False]))
        assert any("tc_wgrad_km_kernel" in n for n in names), names
        assert _ran("wgrad") == "wgmma_nchw", convt2d.last_algorithms()
        # only grad_weight asked: no channels-last copy of anything
        assert not any("nchw_to_nhwc" in n for n in names), names
        check(x, w, b, k, what=f"km {mode} ")


@pytest.mark.parametrize("where", ["x", "gy", "x-nan"])
def test_grad_weight_km_inf_gives_inf_not_nan(where):
    """3xTF32 grad_weight with one +inf operand and positive other operand: the weights it
    reaches are +inf (the cross terms inf * small are dropped, not NaN), the others finite.
    A NaN operand (payload in the low mantissa bits only, which truncation to TF32 would
    turn into inf) gives NaN where it reaches."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma kernels run on compute capability 9.0")
    x = torch.rand(2, 64, 12, 40, dtype=torch.float64) + 0.5
    gy = torch.rand(2, 64, 14, 42, dtype=torch.float64) + 0.5
    if where == "x":
        x[1, 5, 6, 20] = float("inf")
    elif where == "gy":
        gy[0, 7, 3, 11] = float("inf")
    w = torch.randn(64, 64, 3, 3, dtype=torch.float64)
    ref = torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1, [False, True, False])[1]
    xf = x.float()
    if where == "x-nan":
        xf.view(torch.int32)[1, 5, 6, 20] = 0x7F800001  # NaN with payload bit 0 only
        x[1, 5, 6, 20] = float("nan")
        ref = torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1, [False, True, False])[1]
    with _tf32_off():
        gw = torch.ops.convt2d.backward(gy.float().cuda(), xf.cuda(), w.float().cuda(),
                                        [1, 1], [0, 0], [0, 0], 1, [1, 1],
                                        [False, True, False])[1]
    if where == "x-nan":
        assert ref.isnan().any() and torch.equal(gw.isnan().cpu(), ref.isnan())
        fin = ref.isfinite()
        assert_close(gw[fin.cuda()], ref[fin].cuda(), torch.float32, "cuda", "other weights")
        return
    assert not gw.isnan().any(), "NaN in grad_weight"
    assert torch.equal(gw.isinf().cpu(), ref.isinf()) and (gw[gw.isinf()] > 0).all()
    fin = ref.isfinite()
    assert_close(gw[fin.cuda()], ref[fin].cuda(), torch.float32, "cuda", "finite weights")


# torch.backends.cudnn.benchmark = True: the first call of a shape times every kernel choice
# (direct / implicit GEMM / warp-specialised GEMM forward, both grad_input kernels, every
# grad_weight tile) on the real output buffers, then runs the winner; later calls and CUDA
# graph captures use the cached choice. Results must be right on the tuning call, on cached
# calls, and when replaying a graph captured after tuning.
_TUNE_CFGS = [
    _WGRAD_CFGS[0], _WGRAD_CFGS[2], _WS_CFGS[1], CFG,
    Cfg(2, 16, 8, 20, 24, k=3, stride=2, padding=1, bias=True),  # direct-kernel territory
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _TUNE_CFGS, ids=lambda c: c.id())
def test_autotune_cudnn_benchmark(cfg, dtype, layout):
    with torch.backends.cudnn.flags(enabled=True, benchmark=True):
        for it in range(2):  # tuning call, then the cached choice
            x, w, b = cfg.make(dtype, "cuda")
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            check(x, w, b, cfg.kwargs(), what=f"benchmark call {it} {layout} ")


def test_autotune_then_graph_capture():
    cfg = _WS_CFGS[1]
    dtype = torch.bfloat16
    with torch.backends.cudnn.flags(enabled=True, benchmark=True):
        x, w, b = cfg.make(dtype, "cuda")
        convt2d.forward(x, w, b, **cfg.kwargs())  # tunes
        sx = x.clone()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            convt2d.forward(sx, w, b, **cfg.kwargs())
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = convt2d.forward(sx, w, b, **cfg.kwargs())
        for _ in range(2):
            sx.copy_(torch.randn_like(sx))
            out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            ref, _ = reference(sx, w, b, cfg.kwargs())
            assert_close(out, ref, dtype, "cuda", "graph replay after tuning")


# Tuning is paid once per problem per process: with benchmark on, a second round of the same
# forward + backward calls times nothing (every op's choice is a cache hit). The shapes cover
# each tuned op (forward, grad_input, grad_weight): the tensor-core grad_weight tiles, whose
# heuristic choice once was never cached (it re-tuned on every backward), pix2pix decoder
# layers (k4 s2 p1) from 2x2 to 32x32, and the direct-kernel territory.
_TUNE_ONCE_CFGS = _TUNE_CFGS + [
    Cfg(2, 256, 128, 2, 2, k=4, stride=2, padding=1, bias=True),
    Cfg(2, 128, 64, 16, 16, k=4, stride=2, padding=1, bias=False),
]


def _fwd_bwd_round(dtypes, layouts, amp=False):
    for cfg in _TUNE_ONCE_CFGS:
        for dtype, math in dtypes:
            for layout in layouts:
                x, w, b = cfg.make(torch.float32 if amp else dtype, "cuda")
                if layout == "channels_last":
                    x = x.contiguous(memory_format=torch.channels_last)
                with torch.backends.cudnn.flags(enabled=True, benchmark=True,
                                                allow_tf32=(math == "tf32")):
                    if amp:
                        with torch.autocast("cuda", dtype=dtype):
                            xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
                            out = convt2d.forward(xl, wl, b, **cfg.kwargs())
                            torch.autograd.grad(out, [xl, wl], torch.randn_like(out))
                    else:
                        check(x, w, b, cfg.kwargs(), what=f"{cfg.id()} {dtype} {math} {layout} ")


_TUNE_DTYPES = [(torch.bfloat16, "-"), (torch.float16, "-"), (torch.float32, "tf32"),
                (torch.float32, "ieee")]


def test_autotune_tunes_once_per_problem():
    """Two identical rounds of forward + backward over shapes x dtypes x math modes x layouts x
    bias: the first tunes (and is right), the second does no timing at all."""
    convt2d.clear_tuning_cache()
    layouts = ["nchw", "channels_last"]
    _fwd_bwd_round(_TUNE_DTYPES, layouts)
    first = convt2d.info()["autotune"]
    assert first["tunings"] > 0, "benchmark on, yet nothing was tuned"
    assert first["tunings"] == first["entries"]
    log = convt2d.tuning_log()
    assert len(log) == first["entries"]
    ops = {r["key"].split(",")[0] for r in log}
    assert {"fwd", "dgrad", "wgrad"} <= ops, ops
    for r in log:
        names = [c["name"] for c in r["candidates"]]
        assert r["chosen"] in names and "heuristic" in names, r
        timed = [c for c in r["candidates"] if c["ms"] is not None]
        assert timed, f"no candidate ran: {r}"
        assert all(c["ms"] > 0 for c in timed), r
    _fwd_bwd_round(_TUNE_DTYPES, layouts)
    second = convt2d.info()["autotune"]
    assert second["cache_misses"] == first["cache_misses"], (
        f"the second identical round missed the cache "
        f"{second['cache_misses'] - first['cache_misses']} times (and tuned again)")
    assert second["tunings"] == first["tunings"]
    assert second["cache_hits"] > first["cache_hits"]


def test_autotune_once_under_autocast():
    convt2d.clear_tuning_cache()
    for dtype in (torch.bfloat16, torch.float16):
        _fwd_bwd_round([(dtype, "-")], ["nchw"], amp=True)
        a = convt2d.info()["autotune"]
        assert a["tunings"] > 0
        _fwd_bwd_round([(dtype, "-")], ["nchw"], amp=True)
        b = convt2d.info()["autotune"]
        assert b["cache_misses"] == a["cache_misses"] and b["tunings"] == a["tunings"]


def test_autotune_keeps_the_heuristic_within_noise():
    """The heuristics' choice is kept unless a candidate beats it by more than the noise
    margin (3% + 1 us): the chosen candidate's time is never above the heuristic's."""
    convt2d.clear_tuning_cache()
    _fwd_bwd_round([(torch.bfloat16, "-")], ["nchw"])
    for r in convt2d.tuning_log():
        t = {c["name"]: c["ms"] for c in r["candidates"] if c["ms"] is not None}
        if r["chosen"] != "heuristic" and "heuristic" in t:
            assert t[r["chosen"]] * 1.03 + 0.001 < t["heuristic"], r


# The direct kernel (forced with CONVT2D_ALGO=fwd:direct) on odd shapes: one tap per phase
# (seedC-like), groups with 8 channels per group (seedD-like), channel counts that are not
# multiples of 16, 8 and 4 output channels per group (its 8- and 4-channel variants), several
# row and column tiles, output_padding and bias.
_DIRECT_CFGS = [
    Cfg(2, 32, 64, 9, 13, k=3, stride=5, padding=1, dilation=2, bias=False),
    Cfg(2, 32, 64, 10, 12, k=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4),
    Cfg(2, 20, 24, 11, 9, k=3, stride=2, padding=1, output_padding=1),
    Cfg(3, 40, 8, 7, 33, k=(2, 3), stride=(1, 2), padding=(0, 1)),
    Cfg(2, 16, 4, 6, 7, k=3, stride=3, bias=False),
    Cfg(2, 6, 12, 8, 8, k=4, stride=2, padding=1, groups=2),
    Cfg(1, 96, 16, 21, 40, k=3, stride=2, padding=1),
    # tensor-core direct kernel: Cout/groups > 64 (two channel blocks of 64), 3 chunks of 8
    # input channels (odd K-item counts: the zero pad item), 20 channels (a partial chunk),
    # dilation 7 (a wide staged window), a 1-row phase, even stride (padded staging)
    Cfg(2, 24, 72, 9, 10, k=3, stride=3, padding=1, bias=True),
    Cfg(2, 20, 40, 6, 37, k=(2, 3), stride=(3, 4), dilation=(1, 7), padding=(0, 3)),
    Cfg(3, 12, 6, 1, 45, k=(1, 3), stride=(2, 2), output_padding=(1, 1), bias=True),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp16-cuda-cores", "fp32", "fp32-tf32"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _DIRECT_CFGS, ids=lambda c: c.id())
def test_direct_kernel_shapes(cfg, dtype, layout, monkeypatch):
    """16-bit and fp32 with TF32 allowed ("fp32-tf32") run the tensor-core direct kernel
    (forward/direct_tensor_core.cu); "fp16-cuda-cores" forces the CUDA-core one (fwd:direct_simt),
    and fp32 with TF32 off always runs it. (fwd:direct: the direct forward's own choice.)"""
    if dtype == "fp16-cuda-cores":
        _algo(monkeypatch, "fwd:direct_simt")
        dtype = "fp16"
    else:
        _algo(monkeypatch, "fwd:direct")
    tf32 = dtype == "fp32-tf32"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp32-tf32": torch.float32}[dtype]
    x, w, b = cfg.make(dt, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        check(x, w, b, cfg.kwargs(), backward=False, what=f"direct {layout} {dtype} ")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_direct_tc_kernel_runs(dtype, monkeypatch):
    """Memory-bound 16-bit forwards (one tap per phase; 8 channels per group), and fp32 ones
    with TF32 allowed (torch's default), run the tensor-core direct kernel with
    CONVT2D_ALGO=fwd:direct_tensorop (the planner takes it by default where the layer is large
    enough to repay the weight packing) and the CUDA-core one with fwd:direct_simt; both
    match the float64 reference. fp32 with TF32 off never runs it. One input pixel is +inf: the outputs it reaches are inf, no output is NaN (the
    kernel pads odd K-item counts with zeros on both operands, never x * 0)."""
    cfgs = [Cfg(2, 32, 64, 12, 20, k=3, stride=5, padding=1, dilation=2, bias=True),
            Cfg(2, 32, 64, 10, 14, k=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1),
                groups=4)]
    if dtype == torch.float32:
        for cfg in cfgs:
            x, w, b = cfg.make(dtype, "cuda")
            with _tf32_off():
                names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
                assert not any("direct_tc_kernel" in n for n in names), (cfg.id(), names)
                check(x, w, b, cfg.kwargs(), backward=False, what="TF32 off ")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        _direct_tc_runs(cfgs, dtype, monkeypatch)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_wide_input_rows_leave_the_direct_kernel(dtype, monkeypatch):
    """Few outputs (memory-bound by the rules) but 192 input channels per group: the direct
    tensor-core kernel's staged input rows are so wide that its tile holds one row per stride
    phase (2-4 warps per SM), and the cost model's occupancy term (direct_tc_occupancy) moves
    the default off it (to the implicit GEMM, which measured 2-13x faster on such layers,
    docs/design.md, "Direct"; in bf16 now the GEMM + col2im). The default and the forced direct
    kernel both match the reference."""
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("the tensor-core direct kernel needs compute capability 8.0+")
    _algo(monkeypatch, None)
    cfg = Cfg(32, 192, 21, 16, 16, k=(5, 1), stride=2, padding=1)
    x, w, b = cfg.make(dtype, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, cfg.kwargs(), backward=False, what="default ")
        assert _ran("fwd") not in ("direct", "direct_tensorop", "direct_simt"), \
            convt2d.last_algorithms()
        _algo(monkeypatch, "fwd:direct_tensorop")
        check(x, w, b, cfg.kwargs(), backward=False, what="forced direct_tensorop ")
        assert _ran("fwd") == "direct_tensorop", convt2d.last_algorithms()


def _direct_tc_runs(cfgs, dtype, monkeypatch):
    for cfg in cfgs:
        for spec, want in [("fwd:direct_tensorop", True), ("fwd:direct_simt", False)]:
            _algo(monkeypatch, spec)
            x, w, b = cfg.make(dtype, "cuda")
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            assert any("direct_tc_kernel" in n for n in names) == want, (cfg.id(), spec, names)
            assert _ran("fwd") == spec.split(":")[1], convt2d.last_algorithms()
            check(x, w, b, cfg.kwargs(), backward=False, what=f"direct {spec} ")
        for nt in ("8", "4", "2"):  # 64, 32, 16 output channels per block (default cap: 32)
            _algo(monkeypatch, f"fwd:direct_tensorop,direct_nt={nt}")
            x, w, b = cfg.make(dtype, "cuda")
            check(x, w, b, cfg.kwargs(), backward=False, what=f"direct_tc nt={nt} ")
        _algo(monkeypatch, "fwd:direct_tensorop")
        x, w, b = cfg.make(dtype, "cuda")
        x[1, 3, 4, 5] = float("inf")
        w = w.abs() + 0.1
        out = convt2d.forward(x, w, None, **cfg.kwargs())
        ref = F.conv_transpose2d(x.double().cpu(), w.double().cpu(), **cfg.kwargs())
        assert not out.isnan().any(), "NaN in the output"
        assert torch.equal(out.isinf().cpu(), ref.isinf()), "inf pattern differs"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("nt", ["8", "4", "2"])
def test_direct_tc_single_warp_block(nt, dtype, monkeypatch):
    """sw = 1 and one row per tile give blocks of one warp (32 threads): with 64 channels per
    block (CONVT2D_ALGO=direct_nt=8) the bias staging once covered only channels 0..31, and
    channel 32 read uninitialised shared memory (found by a Python model of the kernel,
    2026-11-23)."""
    _algo(monkeypatch, f"fwd:direct,direct_nt={nt}")
    for cfg in [Cfg(1, 1, 33, 1, 1, k=1, bias=False), Cfg(2, 3, 70, 1, 5, k=1, bias=True)]:
        x, w, b = cfg.make(dtype, "cuda")
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            assert any("direct_tc_kernel" in n for n in names), (cfg.id(), names)
            check(x, w, b, cfg.kwargs(), backward=False, what=f"one-warp nt={nt} ")


# The narrow kernel (forward/narrow_output.cu): 1..8 output channels per group (CO = 1, 2, 3, 4, and 8 with
# the padding of 5..7), many input channels. Shapes: a GAN RGB layer (k4 s2 p1, bias);
# Cout 1 with 40 input channels (slices of uneven length); Cout 2 with output_padding and
# W = 37 (two column tiles, one partial); stride 1 k3 (three tap rows: the 4-row chunk with
# one unused) and k5 (a second chunk); groups with dilation dividing the stride (d=2, s=2)
# and a stride-3 column phase; a 1x1 kernel at stride 2 (phases no tap reaches: bias only);
# 70 rows (several row tiles; rows past the last phase row).
_NARROW_CFGS = [
    Cfg(2, 64, 3, 8, 8, k=4, stride=2, padding=1, bias=True),
    Cfg(3, 40, 1, 7, 9, k=4, stride=2, padding=1, bias=False),
    Cfg(2, 24, 2, 5, 37, k=3, stride=2, padding=1, output_padding=1, bias=True),
    Cfg(2, 30, 8, 6, 6, k=3, stride=1, padding=1, bias=False),
    Cfg(1, 20, 5, 9, 11, k=5, stride=1, padding=2, bias=True),
    Cfg(2, 16, 6, 5, 7, k=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=2,
        bias=True),
    Cfg(2, 36, 3, 5, 5, k=1, stride=2, bias=True),
    Cfg(1, 9, 7, 70, 3, k=(2, 3), stride=(1, 2), padding=(0, 1), bias=True),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-tf32"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _NARROW_CFGS, ids=lambda c: c.id())
def test_narrow_kernel_shapes(cfg, dtype, layout, monkeypatch):
    """The narrow kernel, forced (CONVT2D_ALGO=fwd:narrow_output), runs and matches the float64
    reference; every K split (narrow_wp = 8, 4, 2, 1 pixel warps) on NCHW."""
    tf32 = dtype == "fp32-tf32"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp32-tf32": torch.float32}[dtype]
    for wp in (["8", "4", "2", "1"] if layout == "nchw" else ["2"]):
        _algo(monkeypatch, f"fwd:narrow_output,narrow_wp={wp}")
        x, w, b = cfg.make(dt, "cuda")
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
            names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
            assert any("narrow_fwd_kernel" in n for n in names), (cfg.id(), wp, names)
            assert _ran("fwd") == "narrow_output", convt2d.last_algorithms()
            check(x, w, b, cfg.kwargs(), backward=False, what=f"narrow {layout} wp={wp} ")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_narrow_kernel_routing(dtype, monkeypatch):
    """A GAN RGB layer (64 -> 3, k4 s2 p1; 256 reduced channels per output) runs the narrow
    kernel by default from NCHW x, in fp32 with TF32 on and off; forcing another algorithm
    (CONVT2D_ALGO=fwd:direct) keeps it off; dilation 2 at stride 1 (tap rows two apart) is
    declined, also when forced (fwd:narrow_output: the heuristic choice runs instead)."""
    cfg = Cfg(2, 64, 3, 20, 21, k=4, stride=2, padding=1, bias=True)
    for tf32 in ([True, False] if dtype == torch.float32 else [True]):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
            for spec, want in [(None, True), ("fwd:direct", False)]:
                _algo(monkeypatch, spec)
                x, w, b = cfg.make(dtype, "cuda")
                names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
                assert any("narrow_fwd_kernel" in n for n in names) == want, (spec, names)
                check(x, w, b, cfg.kwargs(), backward=False, what=f"{spec or 'default'} ")
    _algo(monkeypatch, "fwd:narrow_output")
    dil = Cfg(2, 64, 3, 9, 10, k=3, stride=1, padding=2, dilation=2, bias=True)
    x, w, b = dil.make(dtype, "cuda")
    names = _kernel_names(lambda: convt2d.forward(x, w, b, **dil.kwargs()))
    assert not any("narrow_fwd_kernel" in n for n in names), names
    assert _ran("fwd") != "narrow_output", convt2d.last_algorithms()
    check(x, w, b, dil.kwargs(), backward=False, what="narrow declined ")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_narrow_idle_phases_run_the_gemm(dtype, monkeypatch):
    """Few outputs per group from 32+ input channels per group on stride phases of at most
    16x16 pixels (the narrow kernel's warps mostly idle): not the narrow kernel by default
    (the rules' tensor-core implicit GEMM, channels padded where Cin/groups is not whole
    16-byte chunks, unless the cost model predicts another 2x faster); with TF32 off (fp32)
    the narrow kernel still."""
    _algo(monkeypatch, None)
    for cfg in [Cfg(2, 64, 3, 9, 10, k=4, stride=2, padding=1, bias=True),
                Cfg(4, 34, 2, 5, 7, k=3, stride=1, bias=False)]:
        x, w, b = cfg.make(dtype, "cuda")
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            check(x, w, b, cfg.kwargs(), backward=False, what="idle narrow ")
            assert _ran("fwd") != "narrow_output", (cfg, convt2d.last_algorithms())
        if dtype == torch.float32:
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                check(x, w, b, cfg.kwargs(), backward=False, what="idle narrow ieee ")
                assert _ran("fwd") == "narrow_output", (cfg, convt2d.last_algorithms())


# The patch GEMM (forward/patch_gemm.cu): kernel == stride, no padding, NCHW; one GEMM per (n, group)
# pixel-shuffled in the epilogue. Shapes: U-Net-like; a K tail (Cin/groups not a multiple of
# the 32 / 16-channel k-tile) and an N tail (Cout/groups*kh*kw not a multiple of 128);
# groups; W = 40 (8-wide tiles); W = 200 (two 128-wide column tiles, one partial) with
# k=4 s=4 (16 taps per channel); kw = 1; 1x1; W = 8 with H = 33 (8 x 16 tiles, rows past the
# image); N = 1; kw = 8, 16, 64 (the fp32 epilogue's kw >= 8 staging).
_PATCH_CFGS = [
    Cfg(2, 64, 32, 8, 16, k=2, stride=2, bias=True),
    Cfg(3, 40, 24, 5, 24, k=2, stride=2, bias=True),
    Cfg(2, 48, 40, 6, 40, k=2, stride=2, groups=2, bias=True),
    Cfg(1, 32, 16, 4, 200, k=4, stride=4, bias=False),
    Cfg(2, 24, 20, 7, 8, k=(2, 1), stride=(2, 1), bias=True),
    Cfg(2, 72, 136, 3, 16, k=1, stride=1, bias=True),
    Cfg(1, 16, 64, 33, 8, k=2, stride=2, bias=False),
    Cfg(2, 20, 12, 5, 24, k=(1, 8), stride=(1, 8), bias=True),
    Cfg(1, 24, 8, 6, 16, k=(2, 16), stride=(2, 16), bias=True),
    Cfg(2, 12, 6, 3, 8, k=(1, 64), stride=(1, 64), bias=False),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("cfg", _PATCH_CFGS, ids=lambda c: c.id())
def test_patch_gemm_kernel(cfg, dtype, monkeypatch):
    """kernel == stride shapes run the patch GEMM (forced with CONVT2D_ALGO=fwd:patch_gemm,
    which the default also picks for compute-bound ones) and match the float64 reference; the
    backward (other kernels) too."""
    _algo(monkeypatch, "fwd:patch_gemm")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
    assert any("patch_gemm_kernel" in n for n in names), (cfg.id(), names)
    assert _ran("fwd") == "patch_gemm", convt2d.last_algorithms()
    flags = _tf32_off() if dtype == "fp32-ieee" else torch.backends.cudnn.flags(
        enabled=True, allow_tf32=True)
    with flags:
        check(x, w, b, cfg.kwargs(), backward=True, what=f"patch {dtype} ")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_patch_gemm_is_the_default_for_unet_like_shapes(dtype, monkeypatch):
    """U-Net's k=2 s=2 upsampling (NCHW) runs the patch GEMM by default; channels-last input
    and padding go elsewhere. An inf input pixel gives inf exactly where torch's does (the
    K tail is zero on both operands, never x * 0)."""
    _algo(monkeypatch, None)
    cfg = Cfg(2, 96, 64, 12, 16, k=2, stride=2, bias=True)
    x, w, b = cfg.make(dtype, "cuda")
    names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
    assert any("patch_gemm_kernel" in n for n in names), names
    xc = x.contiguous(memory_format=torch.channels_last)
    names = _kernel_names(lambda: convt2d.forward(xc, w, b, **cfg.kwargs()))
    assert not any("patch_gemm_kernel" in n for n in names), names
    names = _kernel_names(lambda: convt2d.forward(x, w, b, stride=2, padding=1))
    assert not any("patch_gemm_kernel" in n for n in names), names
    x = x.clone()
    x[1, 5, 3, 7] = float("inf")
    w = w.abs() + 0.1
    out = convt2d.forward(x, w, None, stride=2)
    ref = F.conv_transpose2d(x.double().cpu(), w.double().cpu(), stride=2)
    assert not out.isnan().any(), "NaN in the output"
    assert torch.equal(out.isinf().cpu(), ref.isinf()), "inf pattern differs"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_channels_last_copy_odd_pixel_counts(dtype):
    """Backward with odd H*W. In fp32 the first shape runs common/layout_kernels.cu's 4-channel-vector copy
    for x (16 channels, 99 pixels) and grad_output (12 channels, 357 pixels), several pixel
    tiles with a partial one; its channel counts are not multiples of 8, so bf16 (and both
    dtypes on the grouped second shape) take the paths without channels-last copies. The
    16-bit copy runs in the benchmark's seedD backward, whose error vs float64 the benchmark
    reports."""
    for cfg in [Cfg(2, 16, 12, 9, 11, k=3, stride=2, padding=1),
                Cfg(1, 68, 72, 13, 7, k=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1),
                    groups=4, bias=False)]:
        x, w, b = cfg.make(dtype, "cuda")
        with _tf32_off():
            check(x, w, b, cfg.kwargs(), backward=True, what=f"{cfg.id()} ")


def _random_patch_cfgs(count, seed):
    """kernel == stride shapes the patch GEMM takes (W whole 16-byte chunks, kh*kw | 128,
    Cout/groups*kh*kw whole chunks), drawn with a fixed seed: tile widths 8..128 with partial
    tiles, kh in 1..8, kw in 1..16, groups, K tails."""
    import random
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        kh, kw = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8, 16])
        if 128 % (kh * kw):
            continue
        g = rng.choice([1, 1, 2, 3])
        cig, cog = rng.randint(1, 70), rng.randint(1, 40)
        while (cog * kh * kw) % 8:
            cog += 1
        out.append(Cfg(rng.randint(1, 3), cig * g, cog * g, rng.randint(1, 21),
                       8 * rng.randint(1, 33), k=(kh, kw), stride=(kh, kw), groups=g,
                       bias=rng.random() < 0.5))
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("cfg", _random_patch_cfgs(12, 2026), ids=lambda c: c.id())
def test_patch_gemm_random_shapes(cfg, dtype, monkeypatch):
    _algo(monkeypatch, "fwd:patch_gemm")
    x, w, b = cfg.make(dtype, "cuda")
    names = _kernel_names(lambda: convt2d.forward(x, w, b, **cfg.kwargs()))
    assert any("patch_gemm_kernel" in n for n in names), (cfg.id(), names)
    assert _ran("fwd") == "patch_gemm", convt2d.last_algorithms()
    check(x, w, b, cfg.kwargs(), backward=False, what="patch random ")


def _op_args(k):
    """The positional stride .. dilation arguments of torch.ops.convt2d.backward from
    cfg.kwargs()."""
    return [list(k["stride"]), list(k["padding"]), list(k["output_padding"]), k["groups"],
            list(k["dilation"])]


def _gather_case(cfg, dtype, layout):
    """The gather tests' inputs: (torch dtype, x, w, b, math flags) for dtype "bf16", "fp16",
    "fp32" (TF32 on) or "fp32-ieee" (TF32 off) and x's layout "nchw" or "nhwc"."""
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    flags = _tf32_off() if dtype == "fp32-ieee" else torch.backends.cudnn.flags(
        enabled=True, allow_tf32=True)
    return dt, x, w, b, flags


# The backward's tap gather (common/layout_kernels.cu) for kh*kw <= sh*sw: grad_output gathered channels-last
# per tap, both gradients then 1x1 problems over Cout*kh*kw channels. Shapes: seedC-like
# (k=3 d=2 s=5 p=1: border taps outside grad_output); U-Net's k=2 s=2 with bias; groups with
# padding and output padding and two pixel tiles (W = 70, one partial); Cout*kh*kw = 80 (a
# partial 64-channel tile); overlapping taps (k=2 d=2 s=2, gathered twice); N = 1 with
# k=(1, 4) s=(2, 2).
_GATHER_CFGS = [
    Cfg(2, 16, 24, 9, 13, k=3, stride=5, padding=1, dilation=2),
    Cfg(2, 32, 16, 7, 12, k=2, stride=2, bias=True),
    Cfg(2, 32, 48, 6, 70, k=(2, 3), stride=(3, 2), padding=(1, 0), output_padding=(1, 1),
        groups=2),
    Cfg(3, 8, 20, 5, 9, k=2, stride=2),
    Cfg(2, 16, 16, 8, 8, k=2, stride=2, dilation=2),
    Cfg(1, 24, 8, 11, 6, k=(1, 4), stride=(2, 2), padding=(0, 1)),
]
# Overlapping taps (an im2col of grad_output, where pixels are few against input channels):
# k4 s2 p1 on 3x2 images; k3 d2 at stride 1 with bias; k(3,5) s(2,1) with output padding and
# two groups; a 1x1 input with a kernel larger than the output (edge taps outside it).
_GATHER_OVERLAP_CFGS = [
    Cfg(2, 64, 24, 3, 2, k=4, stride=2, padding=1),
    Cfg(1, 48, 16, 2, 3, k=3, stride=1, padding=1, dilation=2, bias=True),
    Cfg(2, 64, 32, 2, 2, k=(3, 5), stride=(2, 1), padding=(1, 2), output_padding=(1, 0),
        groups=2),
    Cfg(3, 32, 8, 1, 1, k=5, stride=2, padding=1, bias=True),
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("cfg", _GATHER_CFGS + _GATHER_OVERLAP_CFGS, ids=lambda c: c.id())
def test_backward_tap_gather(cfg, dtype, layout, monkeypatch):
    """Backward forced through the tap gather (no more taps than stride phases, or overlapping
    taps on few pixels: an im2col) runs the gather and the 1x1 kernels, and every gradient
    matches the float64 reference (x channels-last too; the gradients keep torch's layouts,
    which check() compares). A channels-last grad_output (as autograd gives for channels-last
    x) is gathered through its strides. The gather is forced (bwd:tap_gather): the planner
    declines it on small images where kernel == stride (test_tap_gathered_planned)."""
    _algo(monkeypatch, "bwd:tap_gather")
    dt, x, w, b, flags = _gather_case(cfg, dtype, layout)
    with flags:
        out = convt2d.forward(x, w, b, **cfg.kwargs())
        gy = torch.randn(out.shape, device="cuda", dtype=dt)  # NCHW: the gather reads it so
        k = cfg.kwargs()
        args = _op_args(k)
        names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                                 [True, True, False]))
        assert any("tap_gather_kernel" in n for n in names), (cfg.id(), names)
        if layout == "nhwc":  # a channels-last grad_output is gathered through its strides
            gy = gy.contiguous(memory_format=torch.channels_last)
            names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                                     [True, True, False]))
            assert any("tap_gather_kernel" in n for n in names), (cfg.id(), names)
        check(x, w, b, cfg.kwargs(), backward=True, gy=gy, what=f"gather {dtype} {layout} ")


# Few output channels from many input channels (the im2col of grad_output at most a few times
# x): an RGB head (k4 s2 p1, bias); a super-resolution layer whose gathered columns (1 x 81)
# are padded to whole chunks; two groups of 3 outputs (27 columns each, padded per group);
# k=(3, 5) with dilation (2, 1) and stride (1, 2), 75 columns; a keypoint-like head with a
# partial pixel tile (N*H*W = 3 * 7 * 9); several pixel tiles an image.
_GATHER_FEW_OUT_CFGS = [
    Cfg(2, 64, 3, 9, 7, k=4, stride=2, padding=1, bias=True),
    Cfg(2, 56, 1, 8, 6, k=9, stride=3, padding=4, output_padding=2, bias=True),
    Cfg(2, 64, 6, 5, 6, k=3, stride=2, groups=2),
    Cfg(1, 32, 5, 10, 4, k=(3, 5), stride=(1, 2), padding=(1, 2), dilation=(2, 1)),
    Cfg(3, 128, 17, 7, 9, k=4, stride=2, padding=1, bias=True),
    Cfg(2, 64, 3, 6, 70, k=4, stride=2, padding=1),  # 420 pixels an image: 7 pixel tiles
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("cfg", _GATHER_FEW_OUT_CFGS, ids=lambda c: c.id())
def test_backward_tap_gather_few_outputs(cfg, dtype, layout, monkeypatch):
    """The tap gather forced on few-output layers: gathered columns padded with zeros to whole
    16-byte chunks (per group), grad_output read NCHW and channels-last, x in either layout;
    every gradient, together and alone, on poisoned memory against the float64 reference,
    and the gather kernel ran."""
    _algo(monkeypatch, "bwd:tap_gather")
    dt, x, w, b, flags = _gather_case(cfg, dtype, layout)
    k = cfg.kwargs()
    args = _op_args(k)
    with flags:
        for go_layout in (torch.contiguous_format, torch.channels_last):
            gy = torch.randn(cfg.out_shape(), device="cuda", dtype=dt).contiguous(
                memory_format=go_layout)
            names = _kernel_names(lambda: torch.ops.convt2d.backward(gy, x, w, *args,
                                                                     [True, True, False]))
            assert any("tap_gather_kernel" in n for n in names), (cfg.id(), names)
            what = f"gather few-out {dtype} {layout} go {go_layout} "
            check(x, w, b, k, backward=True, gy=gy, what=what)
            assert _ran("bwd") == "tap_gather", convt2d.last_algorithms()
            ran = {"bwd": "tap_gather", "dgrad": _ran("dgrad"), "wgrad": _ran("wgrad")}
            _masked_backward_check(cfg, x, w, gy, what, ran)


def test_tap_gather_few_outputs_planned(monkeypatch):
    """The planner gathers few-output layers whose im2col is at most twice x and x has 2^19+
    elements (x in either layout; grad_output NCHW, as check() makes it); smaller layers and
    larger im2cols stay strided."""
    _algo(monkeypatch, None)
    cases = [  # (cfg, dtype, channels-last, expected transform)
        (Cfg(8, 64, 3, 32, 32, k=4, stride=2, padding=1), torch.float32, False, "tap_gather"),
        (Cfg(8, 64, 3, 32, 32, k=4, stride=2, padding=1), torch.bfloat16, True, "tap_gather"),
        (Cfg(8, 56, 1, 48, 48, k=9, stride=3, padding=4, output_padding=2, bias=True),
         torch.bfloat16, False, "tap_gather"),
        (Cfg(2, 64, 3, 16, 16, k=4, stride=2, padding=1), torch.float32, False, "strided"),
        (Cfg(8, 64, 16, 32, 32, k=4, stride=2, padding=1), torch.float32, False, "strided"),
    ]
    for cfg, dt, cl, want in cases:
        x, w, b = cfg.make(dt, "cuda")
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        check(x, w, b, cfg.kwargs(), what=f"planned {cfg.id()} {dt} ")
        assert _ran("bwd") == want, (cfg.id(), dt, convt2d.last_algorithms())


def _masked_backward_check(cfg, x, w, gy, what, ran, masks=("gi", "gw")):
    """The backward op with grad_output gy and output_mask asking for grad_input alone ("gi"),
    grad_weight alone ("gw") or both ("both"), on poisoned memory: each gradient against the
    float64 reference, and each call ran the algorithms `ran` ({pass: name})."""
    k = cfg.kwargs()
    args = _op_args(k)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.autograd.grad(F.conv_transpose2d(xr, wr, None, **k), [xr, wr], gy.double())
    want = {"gi": (0,), "gw": (1,), "both": (0, 1)}
    for m in masks:
        mask = [0 in want[m], 1 in want[m], False]
        poison("cuda", 4 * (x.numel() + w.numel() + gy.numel()) * x.element_size())
        out = torch.ops.convt2d.backward(gy, x, w, *args, mask)
        for i in want[m]:
            assert_close(out[i], ref[i].to(out[i].device), x.dtype, x.device,
                         f"{what}{('grad_input', 'grad_weight')[i]} ({m})")
        for p in ["bwd"] + [("dgrad", "wgrad")[i] for i in want[m]]:
            assert _ran(p) == ran[p], (m, p, convt2d.last_algorithms())


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("cfg", [c for c in _GATHER_CFGS + _GATHER_OVERLAP_CFGS if c.groups == 1],
                         ids=lambda c: c.id())
def test_backward_tap_gather_cublas(cfg, dtype, layout, monkeypatch):
    """The tap gather with both gradients on cuBLAS (bwd:tap_gather_cublas; one group): the
    gathered grad_output channels-last, grad_input of NCHW x through a permuted copy, an NCHW
    x copied channels-last for grad_weight; every gradient, together and alone, matches the
    float64 reference."""
    _algo(monkeypatch, "bwd:tap_gather_cublas")
    dt, x, w, b, flags = _gather_case(cfg, dtype, layout)
    with flags:
        check(x, w, b, cfg.kwargs(), backward=True, what=f"gather cuBLAS {dtype} {layout} ")
        assert _ran("bwd") == "tap_gather_cublas", convt2d.last_algorithms()
        assert _ran("dgrad") == "cublas_gemm" and _ran("wgrad") == "cublas_gemm", \
            convt2d.last_algorithms()
        gy = torch.randn(cfg.out_shape(), device="cuda", dtype=dt)  # NCHW: gathered
        _masked_backward_check(cfg, x, w, gy, f"gather cuBLAS {dtype} {layout} ",
                               {"bwd": "tap_gather_cublas", "dgrad": "cublas_gemm",
                                "wgrad": "cublas_gemm"})


def test_tap_gather_overlap_planned(monkeypatch):
    """Overlapping taps: few pixels against a large weight (4M+ elements) go to the gather with
    cuBLAS (fp32 where the pixels are at most 1/16 of the input channels, 16-bit up to 2.5x);
    other layers with pixels at most half the input channels to the gather on the kernels;
    many pixels (a DCGAN-sized layer) and a 1x1 input (one dense GEMM) stay strided."""
    _algo(monkeypatch, None)
    cases = [  # (cfg, dtype, expected transform)
        (Cfg(8, 1024, 512, 2, 2, k=4, stride=2, padding=1), torch.float32, "tap_gather_cublas"),
        (Cfg(8, 1024, 512, 2, 2, k=4, stride=2, padding=1), torch.bfloat16, "tap_gather_cublas"),
        (Cfg(2, 1024, 256, 8, 8, k=4, stride=2, padding=1), torch.bfloat16, "tap_gather_cublas"),
        (Cfg(2, 1024, 256, 8, 8, k=4, stride=2, padding=1), torch.float32, "tap_gather"),
        (Cfg(2, 256, 128, 4, 4, k=3, stride=1, padding=1), torch.bfloat16, "tap_gather"),
        (Cfg(32, 256, 128, 8, 8, k=4, stride=2, padding=1), torch.bfloat16, "strided"),
        # a 1x1 input without padding: the strided problem is one dense GEMM already
        (Cfg(32, 512, 48, 1, 1, k=4, stride=2), torch.bfloat16, "strided"),
    ]
    for cfg, dt, want in cases:
        x, w, b = cfg.make(dt, "cuda")
        check(x, w, b, cfg.kwargs(), what=f"planned {cfg.id()} {dt} ")
        assert _ran("bwd") == want, (cfg.id(), dt, convt2d.last_algorithms())
        if want == "tap_gather_cublas":
            assert _ran("dgrad") == "cublas_gemm" and _ran("wgrad") == "cublas_gemm", \
                convt2d.last_algorithms()


def test_tap_gather_declines_heavy_padding(monkeypatch):
    """k=2 s=2 with padding 3: the gathered tensor (H*W*kh*kw per channel) would be 4x
    grad_output (Ho*Wo), over the gather's 1.5x limit, so the strided path runs; the
    gradients are right either way."""
    _algo(monkeypatch, None)
    cfg = Cfg(2, 16, 16, 6, 6, k=2, stride=2, padding=3)
    x, w, b = cfg.make(torch.bfloat16, "cuda")
    k = cfg.kwargs()
    gy = torch.randn(cfg.out_shape(), device="cuda", dtype=torch.bfloat16)
    names = _kernel_names(lambda: torch.ops.convt2d.backward(
        gy, x, w, list(k["stride"]), list(k["padding"]), list(k["output_padding"]), 1,
        list(k["dilation"]), [True, True, False]))
    assert not any("tap_gather_kernel" in n for n in names), names
    check(x, w, b, k, what="heavy padding ")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_grad_weight_many_output_channels(dtype):
    """65544 output channels x 9 taps: the grad_weight reduction's grid is one dimension, so
    more than 65535 channel tiles launch (they once raised 'invalid configuration')."""
    cfg = Cfg(1, 8, 65544, 4, 4, k=3, bias=False)
    x, w, b = cfg.make(dtype, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, cfg.kwargs(), what="65544 channels ")


# ------------------------------------------------------------------- CONVT2D_ALGO overrides

def test_algo_override_rejects_unknown_names(monkeypatch):
    """An unknown algorithm or option in CONVT2D_ALGO is an error that names it (an unknown
    algorithm's message lists the valid ones), never a silent fallback."""
    cfg = Cfg(2, 16, 24, 7, 9, k=3, stride=2, padding=1)
    x, w, b = cfg.make(torch.float32, "cuda")
    _algo(monkeypatch, "fwd:nonsense")
    with pytest.raises(RuntimeError) as e:
        convt2d.forward(x, w, b, **cfg.kwargs())
    assert "nonsense" in str(e.value) and "patch_gemm" in str(e.value), str(e.value)
    _algo(monkeypatch, "warp=9")
    with pytest.raises(RuntimeError) as e:
        convt2d.forward(x, w, b, **cfg.kwargs())
    assert "warp" in str(e.value), str(e.value)
    _algo(monkeypatch, None)  # and the bad strings leave nothing behind
    check(x, w, b, cfg.kwargs(), backward=False, what="after the bad overrides ")


# Every algorithm of CONVT2D_ALGO forced on a shape it takes, in bf16 and in fp32 with TF32
# allowed (the tensor-core direct kernel takes fp32 only with TF32), forward and backward
# against the float64 reference; last_algorithms() says the forced algorithm ran. The Hopper
# kernels (wgmma, warp-specialised, halo) are built for sm_90a only: elsewhere the planner
# falls back to its heuristic choice, so the name is asserted on compute capability 9.0 only.
_HOPPER_ONLY = {"implicit_gemm_wgmma", "implicit_gemm_wgmma_ws", "implicit_gemm_halo",
                "wgmma_nchw"}
_IGEMM_NAMES = ["implicit_gemm", "implicit_gemm_mma", "implicit_gemm_wgmma",
                "implicit_gemm_wgmma_ws", "implicit_gemm_halo", "implicit_gemm_simt"]
_IGEMM_CFG = Cfg(2, 64, 128, 9, 17, k=3, stride=2, padding=1)
_DIRECT_FORCED_CFG = Cfg(2, 32, 64, 9, 13, k=3, stride=5, padding=1, dilation=2)
_FWD_FORCED = [
    ("narrow_output", Cfg(2, 64, 3, 9, 10, k=4, stride=2, padding=1)),
    ("direct", _DIRECT_FORCED_CFG),
    ("direct_tensorop", _DIRECT_FORCED_CFG),
    ("direct_simt", _DIRECT_FORCED_CFG),
    ("patch_gemm", Cfg(2, 64, 32, 8, 16, k=2, stride=2, bias=True)),
] + [(name, _IGEMM_CFG) for name in _IGEMM_NAMES]
# grad_input at stride 1: the halo kernel takes grad_input GEMMs with stride 1 along x only.
_DGRAD_FORCED_CFG = Cfg(2, 64, 128, 9, 17, k=3, padding=1)
_WGRAD_FORCED = [("tensorop", torch.bfloat16), ("tensorop", torch.float32),
                 ("simt", torch.bfloat16), ("simt", torch.float32),
                 ("wgmma_nchw", torch.float32)]  # fp32 only


def _assert_ran(pass_, name):
    """last_algorithms()[pass_] is `name` (the forced algorithm; "implicit_gemm" is recorded
    as "implicit_gemm", not as the kernel its launcher picked); Hopper-only names on 9.0 only."""
    if name in _HOPPER_ONLY and torch.cuda.get_device_capability() != (9, 0):
        return
    assert _ran(pass_) == name, (pass_, name, convt2d.last_algorithms())


def _backward_here(cfg, x, w, mask):
    """torch.ops.convt2d.backward of only the gradients in `mask`, so that last_algorithms()
    shows that call's choices."""
    k = cfg.kwargs()
    gy = torch.randn(cfg.out_shape(), device="cuda").to(x.dtype)
    return torch.ops.convt2d.backward(gy, x, w, *_op_args(k), mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name,cfg", _FWD_FORCED, ids=[n for n, _ in _FWD_FORCED])
def test_every_forward_algorithm_forced(name, cfg, dtype, monkeypatch):
    _algo(monkeypatch, f"fwd:{name}")
    x, w, b = cfg.make(dtype, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, cfg.kwargs(), what=f"fwd:{name} ")
    _assert_ran("fwd", name)


_BWD_FORCED = ([("dgrad", n, d, _DGRAD_FORCED_CFG, [True, False, False])
                for n in _IGEMM_NAMES for d in (torch.bfloat16, torch.float32)] +
               [("wgrad", n, d, _IGEMM_CFG, [False, True, False]) for n, d in _WGRAD_FORCED])


@pytest.mark.parametrize("pass_,name,dtype,cfg,mask", _BWD_FORCED,
                         ids=[f"{p}:{n}-{str(d).replace('torch.', '')}"
                              for p, n, d, _, _ in _BWD_FORCED])
def test_every_backward_algorithm_forced(pass_, name, dtype, cfg, mask, monkeypatch):
    _algo(monkeypatch, f"{pass_}:{name},bwd:strided")
    x, w, b = cfg.make(dtype, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, cfg.kwargs(), what=f"{pass_}:{name} ")
        _backward_here(cfg, x, w, mask)
    _assert_ran(pass_, name)
    assert _ran("bwd") == "strided", convt2d.last_algorithms()


# Split-K of the tensor-core implicit GEMM (forward and grad_input): tiny images with many
# channels (1x1 and 2x2 inputs, a generator's first layer), a strided grouped layer with
# dilation and output padding (phases with different tap counts), and more splits than the
# K loop has tiles (empty ranges write zero partials).
_SPLIT_K_CFGS = [
    Cfg(2, 256, 64, 1, 1, k=3, padding=1, bias=True),
    Cfg(3, 128, 96, 2, 2, k=4, stride=2, padding=1, bias=True),
    Cfg(2, 64, 48, 3, 5, k=(3, 4), stride=(2, 3), padding=(1, 1), output_padding=(1, 2),
        dilation=(1, 2), groups=2, bias=True),
    Cfg(1, 16, 32, 4, 4, k=1, bias=False),
]


@pytest.mark.parametrize("splits", [2, 7, 64])
@pytest.mark.parametrize("mode", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _SPLIT_K_CFGS, ids=lambda c: c.id())
def test_split_k_forced(cfg, layout, mode, splits, monkeypatch):
    _algo(monkeypatch, f"fwd:implicit_gemm,dgrad:implicit_gemm,bwd:strided,k_splits={splits}")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=(mode != "fp32-ieee")):
        check(x, w, b, cfg.kwargs(), what=f"k_splits={splits} {layout} {mode} ")
    assert _ran("fwd") == "implicit_gemm" and _ran("dgrad") == "implicit_gemm"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_split_k_by_default_is_deterministic(dtype):
    """A 1x1 input with many channels (the planner splits K): right, and bitwise the same run
    to run (the partials are added in a fixed order)."""
    cfg = Cfg(2, 512, 128, 1, 1, k=4, stride=1, bias=True)
    x, w, b = cfg.make(dtype, "cuda")
    out, _ = check(x, w, b, cfg.kwargs(), what="default split-K ")
    again = convt2d.forward(x, w, b, **cfg.kwargs())
    assert torch.equal(out, again)


# The direct gradients (grad_input/dgrad_direct.cu, grad_weight/wgrad_direct.cu): depthwise
# (CenterNet-style k=4 s=2 upsampling, k=3 s=1), grouped with 2-8 channels per group, few
# output channels (an RGB layer, 1 output channel), one input channel, dilation, output
# padding, padding that crops taps, a tap reach beyond the image, odd sizes, a 1x1 image.
_DIRECT_GRAD_CFGS = [
    Cfg(2, 16, 16, 9, 11, k=4, stride=2, padding=1, groups=16, bias=True),
    Cfg(3, 24, 24, 7, 6, k=3, stride=1, padding=1, groups=24, bias=False),
    Cfg(2, 12, 20, 5, 9, k=(3, 2), stride=(2, 3), dilation=(2, 1), output_padding=(1, 0),
        groups=4),
    Cfg(2, 64, 3, 8, 8, k=4, stride=2, padding=1, bias=True),
    Cfg(3, 5, 1, 6, 7, k=3, stride=2, padding=2),
    Cfg(2, 1, 7, 5, 5, k=(5, 3), stride=1, padding=(0, 1)),
    Cfg(1, 6, 6, 1, 1, k=3, stride=3, groups=3, bias=False),
    Cfg(4, 8, 16, 3, 70, k=(1, 9), stride=(1, 4), padding=(0, 4), groups=8),
    # grad_input's channel chunks (8, 4, 2 input channels a thread): many input channels to
    # one output, grouped with dilation and cropping, output padding, two channels a group.
    Cfg(2, 256, 1, 7, 9, k=4, stride=2, padding=1),
    Cfg(2, 48, 8, 5, 6, k=3, stride=3, padding=1, dilation=2, groups=2, bias=True),
    Cfg(3, 12, 6, 4, 5, k=(2, 3), stride=(1, 2), output_padding=(0, 1), groups=3),
    Cfg(2, 6, 3, 5, 4, k=3, stride=2, groups=3),
    # a 1x1 kernel's dilation (made 1) with the output padding it allows
    Cfg(2, 16, 8, 5, 6, k=1, stride=2, output_padding=2, dilation=3, bias=True),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp64"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _DIRECT_GRAD_CFGS, ids=lambda c: c.id())
def test_direct_gradients_forced(cfg, dtype, layout, monkeypatch):
    _algo(monkeypatch, "dgrad:direct,wgrad:direct,bwd:strided")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp64": torch.float64}[dtype]
    x, w, b = cfg.make(dt, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    check(x, w, b, cfg.kwargs(), what=f"direct grads {layout} {dtype} ")
    _backward_here(cfg, x, w, [True, True, False])
    assert _ran("dgrad") == "direct" and _ran("wgrad") == "direct", convt2d.last_algorithms()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_direct_grad_input_offset_weight(dtype, layout, monkeypatch):
    """grad_input (direct) with a weight one element into its storage: with one output channel
    and a 1x1 kernel the per-group transposed weight is the weight itself, misaligned for the
    kernel's vector loads (it must fall back to narrower ones); also a 1x1 image."""
    _algo(monkeypatch, "dgrad:direct,bwd:strided")
    for N, Cin, H, W in [(3, 16, 5, 7), (4, 16, 1, 1)]:
        x = torch.randn(N, Cin, H, W, device="cuda", dtype=dtype)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(Cin + 1, device="cuda", dtype=dtype)[1:].view(Cin, 1, 1, 1)
        gy = torch.randn(N, 1, (H - 1) * 2 + 1, (W - 1) * 2 + 1, device="cuda", dtype=dtype)
        gi = torch.ops.convt2d.backward(gy, x, w, [2, 2], [0, 0], [0, 0], 1, [1, 1],
                                        [True, False, False])[0]
        assert _ran("dgrad") == "direct", convt2d.last_algorithms()
        xr = x.double().requires_grad_()
        y = torch.nn.functional.conv_transpose2d(xr, w.double(), None, 2)
        (ref,) = torch.autograd.grad(y, xr, gy.double())
        err = ((gi.double() - ref).norm() / ref.norm()).item()
        assert err < (1e-2 if dtype == torch.float16 else 1e-5), (N, Cin, H, W, err)


def test_direct_gradients_deterministic(monkeypatch):
    """grad_weight of the direct kernel over many pixel splits is bitwise the same run to run."""
    _algo(monkeypatch, "wgrad:direct")
    cfg = Cfg(16, 32, 32, 40, 40, k=4, stride=2, padding=1, groups=32)
    x, w, _ = cfg.make(torch.float32, "cuda")
    gy = torch.randn(cfg.out_shape(), device="cuda")
    k = cfg.kwargs()
    args = _op_args(k) + [[False, True, False]]
    a = torch.ops.convt2d.backward(gy, x, w, *args)[1]
    b = torch.ops.convt2d.backward(gy, x, w, *args)[1]
    assert torch.equal(a, b)


def test_depthwise_runs_its_kernels_by_default(monkeypatch):
    """A depthwise k=4 s=2 upsampling layer runs the depthwise kernels in every pass, in
    either layout (grad_weight the tiled one: its taps overlap; grad_input a thread per
    element: 4 taps an element), a k=7 s=2 layer the tiled ones in both gradients (12 taps an
    element), and a k=2 s=2 layer the per-element / per-pixel gradient kernels (no grad_output
    element read twice); a dense 64-channel layer runs none of them."""
    _algo(monkeypatch, None)
    tiled = ("depthwise", "depthwise", "depthwise_tiled")
    for cfg, want in [(Cfg(4, 64, 64, 16, 16, k=4, stride=2, padding=1, groups=64), tiled),
                      (Cfg(4, 64, 64, 16, 16, k=7, stride=2, padding=3, groups=64),
                       ("depthwise", "depthwise_tiled", "depthwise_tiled")),
                      (Cfg(4, 64, 64, 16, 16, k=2, stride=2, groups=64), ("depthwise",) * 3),
                      (Cfg(4, 64, 64, 16, 16, k=3, stride=1, padding=1), None)]:
        for cl in (False, True):
            x, w, b = cfg.make(torch.bfloat16, "cuda")
            if cl:
                x = x.contiguous(memory_format=torch.channels_last)
            convt2d.forward(x, w, b, **cfg.kwargs())
            _backward_here(cfg, x, w, [True, True, False])
            got = (_ran("fwd"), _ran("dgrad"), _ran("wgrad"))
            if want:
                assert got == want, convt2d.last_algorithms()
            else:
                assert not {"direct", "depthwise", "depthwise_tiled"} & set(got), \
                    convt2d.last_algorithms()


def test_cost_model_choices_by_default(monkeypatch):
    """The planner's cost-model rules (docs/design.md, "The planner"): grad_weight of one input
    channel to 512 outputs (k=16 s=4) on the tensor-core GEMM over channels padded to a 16-byte
    chunk, not the depthwise kernels; the forward of few outputs from channels-last x with
    2,560 products per output (128 -> 4, k=(4,5)) on the implicit GEMM, not the direct kernels.
    Each result checked against torch."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("both rules take tensor-core kernels (compute capability 8.0+)")
    _algo(monkeypatch, None)
    for cfg, dtype, cl, want in [
            (Cfg(1, 1, 512, 32, 32, k=16, stride=4), torch.bfloat16, False,
             ("wgrad", "tensorop_padded")),
            (Cfg(2, 128, 4, 32, 32, k=(4, 5), padding=1, bias=False), torch.float32, True,
             ("fwd", "implicit_gemm"))]:
        x, w, b = cfg.make(dtype, "cuda")
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            check(x, w, b, cfg.kwargs(), backward=want[0] != "fwd", what=f"{cfg.id()} ")
            if want[0] == "fwd":
                convt2d.forward(x, w, b, **cfg.kwargs())
            else:
                _backward_here(cfg, x, w, [False, True, False])
        assert _ran(want[0]) == want[1], (cfg.id(), convt2d.last_algorithms())


# The depthwise kernels (forward/depthwise.cu and grad_input/dgrad_depthwise_tiled.cu on the
# tiled kernel of common/depthwise_tiled.cu; grad_input/dgrad_depthwise.cu, a thread per
# element; grad_weight/wgrad_depthwise.cu): plain
# depthwise (CenterNet-style k=4 s=2, k=3 s=1, k=5 s=2 with 96 channels: 3 warps of channels),
# a channel multiplier (2 outputs per input channel), one input channel to 5 outputs,
# dilation with stride (taps every sh / gcd(sh, dh) rows), output padding, padding that crops
# taps, a tap reach beyond the image, a 1x1 image, k=16 s=8 (8 phases of 2 taps a row);
# planes of several tiles in y (24 channels: a partial channel group of 32 where channels-last,
# tiles in x too), an NCHW row of 3 tiles in x, stride 2 on several tiles with more items than
# one pass of the block (NCHW: outputs staged per tile), a dilated k=9 (no register window) and a
# k=16 (16 taps a row: two register windows) whose channels-last tiles need more than 48 KB of
# shared memory, a large dilated kernel whose channels-last stage fits only with fewer channels
# per block (8, or 1 in fp64). For grad_weight's tiles (TN images x TY rows x TX columns of x,
# taps in chunks of up to 4 or 8 columns and 32 / 16 taps): 3x5 planes of 9 images (a tile of
# several images, the last partial), a k=7 with a channel multiplier (two chunks of tap rows;
# four in fp64), dilation 2 with stride 2 (no register window), stride (3, 2) (a window two
# apart per pixel); the k=16 and (18, 13) rows take several chunks of tap columns. Tiny NCHW
# planes (2x2 and 2x3 grad_input, 4x6 output; and the 1x1, 3x5 rows above), which the tiled
# kernel takes with a lane per channel as for channels-last (40 channels: a partial group of
# 32; 20 channels with a multiplier of 2 in grad_input's serial sum); the small layers here
# (fewer blocks than SMs) get tiles of fewer rows. One input channel to a multiple of 8 or 32
# outputs per group, whose forward blocks (channels-last, tiny NCHW planes) stage their one
# read plane once: 96 outputs per input channel (32 lanes of one plane, a register window
# with a k=9 row), 16 per channel (8 lanes; and a k=16 on 40x90 planes: several tiles in x,
# more staged positions than one pass of the block's loads), 24 per channel on 2x2 planes (NCHW
# too) and 32 per channel dilated and strided (no register window). (A single input channel's
# x is NCHW whatever its memory format, and so is its output: those take the NCHW kernel.)
_DEPTHWISE_CFGS = [
    Cfg(2, 16, 16, 9, 11, k=4, stride=2, padding=1, groups=16, bias=True),
    Cfg(3, 40, 40, 7, 6, k=3, stride=1, padding=1, groups=40, bias=False),
    Cfg(2, 96, 96, 6, 5, k=5, stride=2, groups=96, bias=True),
    Cfg(2, 6, 12, 5, 9, k=(3, 4), stride=(2, 3), dilation=(2, 3), output_padding=(1, 2),
        groups=6, bias=True),
    Cfg(3, 1, 5, 6, 7, k=3, stride=2, padding=2),
    Cfg(1, 8, 8, 1, 1, k=3, stride=3, groups=8, bias=True),
    Cfg(2, 4, 4, 3, 70, k=(1, 9), stride=(1, 4), padding=(0, 4), groups=4),
    Cfg(2, 8, 8, 4, 3, k=16, stride=8, padding=4, groups=8, bias=True),
    Cfg(2, 24, 24, 150, 37, k=5, stride=1, padding=2, groups=24),
    Cfg(2, 8, 8, 40, 90, k=4, stride=2, padding=1, groups=8, bias=True),
    Cfg(2, 40, 40, 12, 20, k=9, dilation=2, padding=8, groups=40),
    Cfg(2, 40, 40, 12, 20, k=16, padding=3, groups=40, bias=True),
    Cfg(1, 3, 3, 9, 300, k=3, padding=1, groups=3),
    Cfg(1, 20, 40, 6, 8, k=(18, 13), dilation=(3, 6), groups=20),
    Cfg(9, 24, 24, 3, 5, k=3, padding=1, groups=24),
    Cfg(2, 48, 96, 17, 23, k=7, padding=3, groups=48, bias=True),
    Cfg(3, 36, 36, 10, 13, k=3, stride=2, dilation=2, padding=2, groups=36),
    Cfg(2, 20, 20, 9, 11, k=(2, 5), stride=(3, 2), groups=20),
    Cfg(3, 40, 40, 2, 2, k=3, padding=1, groups=40, bias=True),
    Cfg(2, 20, 40, 2, 3, k=3, stride=2, padding=1, output_padding=1, groups=20),
    Cfg(2, 4, 384, 9, 11, k=9, padding=2, groups=4),
    Cfg(3, 2, 32, 13, 10, k=4, stride=2, padding=1, groups=2, bias=True),
    Cfg(3, 2, 32, 40, 90, k=16, padding=3, groups=2, bias=False),
    Cfg(3, 2, 48, 2, 2, k=3, stride=2, padding=1, groups=2, bias=True),
    Cfg(2, 2, 64, 7, 9, k=3, stride=2, dilation=3, output_padding=1, groups=2, bias=True),
]


@pytest.mark.parametrize("kernels", ["depthwise", "depthwise_tiled"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp64"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _DEPTHWISE_CFGS, ids=lambda c: c.id())
def test_depthwise_forced(cfg, dtype, layout, kernels, monkeypatch):
    """Each backward depthwise kernel pair forced (grad_input and grad_weight: the thread per
    element / pixel kernels, or the tiled ones), with the tiled forward."""
    dgrad = wgrad = kernels
    _algo(monkeypatch, f"fwd:depthwise,dgrad:{dgrad},wgrad:{wgrad},bwd:strided")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp64": torch.float64}[dtype]
    x, w, b = cfg.make(dt, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    check(x, w, b, cfg.kwargs(), what=f"depthwise {layout} {dtype} ")
    assert _ran("fwd") == "depthwise", convt2d.last_algorithms()
    _backward_here(cfg, x, w, [True, True, False])
    assert _ran("dgrad") == dgrad and _ran("wgrad") == wgrad, convt2d.last_algorithms()


def test_depthwise_declines_what_it_cannot_stage(monkeypatch):
    """A depthwise layer whose staged region cannot fit shared memory even for the smallest
    tile (a 3-tap row dilated by 40000) is not taken by the tiled depthwise kernels, forced or
    not, and another kernel computes it correctly."""
    cfg = Cfg(1, 4, 4, 1, 2, k=(1, 3), dilation=(1, 40000), groups=4, bias=True)
    for forced in (None, "fwd:depthwise,dgrad:depthwise_tiled"):
        _algo(monkeypatch, forced)
        x, w, b = cfg.make(torch.float32, "cuda")
        check(x, w, b, cfg.kwargs(), what=f"undecided depthwise {forced} ")
        assert _ran("fwd") != "depthwise", convt2d.last_algorithms()
        _backward_here(cfg, x, w, [True, False, False])
        assert _ran("dgrad") != "depthwise_tiled", convt2d.last_algorithms()


@pytest.mark.parametrize("wgrad", ["depthwise", "depthwise_tiled"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_depthwise_grad_weight_deterministic(layout, wgrad, monkeypatch):
    """grad_weight of each depthwise kernel over many pixel splits is bitwise the same run to
    run (fixed-order sums of the pixel lanes and of the splits)."""
    _algo(monkeypatch, f"wgrad:{wgrad},bwd:strided")
    cfg = Cfg(16, 64, 64, 40, 40, k=4, stride=2, padding=1, groups=64)
    x, w, _ = cfg.make(torch.float32, "cuda")
    gy = torch.randn(cfg.out_shape(), device="cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        gy = gy.contiguous(memory_format=torch.channels_last)
    k = cfg.kwargs()
    args = _op_args(k) + [[False, True, False]]
    a = torch.ops.convt2d.backward(gy, x, w, *args)[1]
    assert _ran("wgrad") == wgrad, convt2d.last_algorithms()
    b = torch.ops.convt2d.backward(gy, x, w, *args)[1]
    assert torch.equal(a, b)


# Channels zero-padded to whole 16-byte chunks so the tensor-core kernels take them
# (implicit_gemm_padded for the forward and grad_input, tensorop_padded for grad_weight): an
# RGB input and output layer,
# 21 and 5 channels, one channel, groups of 3 and 6 channels, stride, dilation, output padding.
_PADDED_CFGS = [
    Cfg(2, 64, 3, 8, 8, k=4, stride=2, padding=1, bias=True),
    Cfg(3, 21, 40, 7, 9, k=3, stride=1, padding=1),
    Cfg(2, 5, 1, 6, 7, k=(3, 2), stride=(2, 1), dilation=(1, 2), output_padding=(1, 0)),
    Cfg(2, 12, 18, 5, 6, k=3, stride=2, padding=1, groups=3, bias=False),
    Cfg(1, 3, 64, 9, 10, k=7, stride=3, padding=2),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp32-ieee"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _PADDED_CFGS, ids=lambda c: c.id())
def test_padded_gradients_forced(cfg, dtype, layout, monkeypatch):
    _algo(monkeypatch, "fwd:implicit_gemm_padded,dgrad:implicit_gemm_padded,"
                       "wgrad:tensorop_padded,bwd:strided")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    x, w, b = cfg.make(dt, "cuda")
    gy = None
    if layout == "channels_last":  # x and grad_output (the padded copies' two source paths)
        x = x.contiguous(memory_format=torch.channels_last)
        gy = torch.randn(cfg.out_shape(), device="cuda").to(dt).contiguous(
            memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dtype != "fp32-ieee"):
        check(x, w, b, cfg.kwargs(), gy=gy, what=f"padded {layout} {dtype} ")
        _backward_here(cfg, x, w, [True, True, False])
    ran = convt2d.last_algorithms()
    cig, cog = cfg.Cin // cfg.groups, cfg.Cout // cfg.groups
    chunk = 4 if dt == torch.float32 else 8
    if cig % chunk:
        assert ran["fwd"] == "implicit_gemm_padded", ran
    if cog % chunk:
        assert ran["dgrad"] == "implicit_gemm_padded", ran
    if cig % chunk or cog % chunk:
        assert ran["wgrad"] == "tensorop_padded", ran


@pytest.mark.parametrize("gy_kind", ["sliced", "expanded"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_padded_gradients_strided_grad_output(gy_kind, dtype, monkeypatch):
    """The padded paths' copy of grad_output reads it through its strides: a column-sliced one
    (W stride 2) and an expanded one (all strides 0, as `out.sum().backward()` makes) give the
    reference's gradients."""
    _algo(monkeypatch, "dgrad:implicit_gemm_padded,wgrad:tensorop_padded,bwd:strided")
    dt = {"bf16": torch.bfloat16}.get(dtype, torch.float32)
    cfg = Cfg(2, 12, 18, 5, 6, k=3, stride=2, padding=1, groups=3, bias=False)
    x, w, b = cfg.make(dt, "cuda")
    shape = cfg.out_shape()
    if gy_kind == "sliced":
        gy = torch.randn(*shape[:3], 2 * shape[3], device="cuda").to(dt)[..., ::2]
    else:
        gy = torch.ones((), device="cuda", dtype=dt).expand(shape)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, cfg.kwargs(), gy=gy, what=f"padded {gy_kind} grad_output {dtype} ")
        torch.ops.convt2d.backward(gy, x, w, *_op_args(cfg.kwargs()), [True, True, False])
    assert _ran("dgrad") == "implicit_gemm_padded", convt2d.last_algorithms()
    assert _ran("wgrad") == "tensorop_padded", convt2d.last_algorithms()


# Passes that are exactly one dense GEMM (cuBLAS, through torch's mm / bmm): 1x1 kernels at
# stride 1 (channels not multiples of 8, one channel, dilation that a 1x1 kernel ignores, a
# single image) and 1x1 inputs (a generator's first layer, non-square kernels, a 1x1 kernel).
_DENSE_GEMM_CFGS = [
    Cfg(3, 24, 40, 7, 9, k=1, bias=True),
    Cfg(2, 21, 5, 6, 5, k=1, bias=False),
    Cfg(2, 1, 3, 4, 6, k=1, bias=True),
    Cfg(1, 16, 8, 5, 4, k=1, dilation=2, bias=True),
    Cfg(4, 20, 12, 1, 1, k=4, stride=2, bias=True),
    Cfg(3, 7, 6, 1, 1, k=(3, 2), stride=3, bias=False),
    Cfg(5, 8, 16, 1, 1, k=1, bias=True),
]
_DENSE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                 "fp32-ieee": torch.float32, "fp64": torch.float64}


@pytest.mark.parametrize("dtype", list(_DENSE_DTYPES))
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _DENSE_GEMM_CFGS, ids=lambda c: c.id())
def test_cublas_gemm_forced(cfg, dtype, layout, monkeypatch):
    _algo(monkeypatch, "fwd:cublas_gemm,dgrad:cublas_gemm,wgrad:cublas_gemm,bwd:strided")
    x, w, b = cfg.make(_DENSE_DTYPES[dtype], "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dtype != "fp32-ieee"):
        check(x, w, b, cfg.kwargs(), what=f"cublas {layout} {dtype} ")
        assert _ran("fwd") == "cublas_gemm", convt2d.last_algorithms()
        # both gradients from a grad_output in x's layout (as autograd gives it)
        gy = torch.randn(cfg.out_shape(), device="cuda").to(x.dtype)
        if layout == "channels_last":
            gy = gy.contiguous(memory_format=torch.channels_last)
        k = cfg.kwargs()
        torch.ops.convt2d.backward(gy, x, w, *_op_args(k), [True, True, False])
        assert (_ran("dgrad"), _ran("wgrad")) == ("cublas_gemm",) * 2, convt2d.last_algorithms()
        # grad_output channels-last with NCHW x (and the reverse): one GEMM over all pixels
        # with grad_input permuted / x copied, or the per-image GEMMs
        gy2 = gy.contiguous(memory_format=torch.channels_last
                            if layout == "nchw" else torch.contiguous_format)
        _masked_backward_check(cfg, x, w, gy2, f"cublas mixed layouts {layout} {dtype} ",
                               {"bwd": "strided", "dgrad": "cublas_gemm",
                                "wgrad": "cublas_gemm"}, masks=("gi", "gw", "both"))


def test_cublas_gemm_planned_and_declined(monkeypatch):
    """The planner takes cuBLAS for dense-GEMM passes (bf16; fp32 where memory-bound), not
    for other shapes, not under torch's deterministic mode, and not for fp32 with TF32 off
    while torch's matmul may use TF32."""
    _algo(monkeypatch, None)
    dense = Cfg(4, 64, 8, 32, 32, k=1, bias=True)
    x, w, b = dense.make(torch.bfloat16, "cuda")
    check(x, w, b, dense.kwargs(), what="cublas planned ")
    _backward_here(dense, x, w, [True, True, False])
    assert (_ran("fwd"), _ran("dgrad"), _ran("wgrad")) == ("cublas_gemm",) * 3, \
        convt2d.last_algorithms()
    x, w, b = dense.make(torch.float32, "cuda")  # fp32: memory-bound, cuBLAS's IEEE GEMM
    check(x, w, b, dense.kwargs(), what="cublas planned fp32 ")
    assert _ran("fwd") == "cublas_gemm", convt2d.last_algorithms()
    # NCHW grad_weight over images whose per-image products ([N][Cin][Cout] fp32) would
    # outgrow x and grad_output (256 channels on 2x2 images): not cuBLAS
    wide = Cfg(8, 256, 256, 2, 2, k=1)
    x, w, b = wide.make(torch.bfloat16, "cuda")
    _backward_here(wide, x, w, [False, True, False])
    assert _ran("wgrad") != "cublas_gemm", convt2d.last_algorithms()
    strided = Cfg(4, 64, 32, 16, 16, k=1, stride=2)
    x, w, b = strided.make(torch.bfloat16, "cuda")
    check(x, w, b, strided.kwargs(), what="stride 2 ")
    assert "cublas_gemm" not in convt2d.last_algorithms().values(), convt2d.last_algorithms()
    x, w, b = dense.make(torch.bfloat16, "cuda")
    torch.use_deterministic_algorithms(True)
    try:
        check(x, w, b, dense.kwargs(), what="deterministic ")
        assert "cublas_gemm" not in convt2d.last_algorithms().values(), convt2d.last_algorithms()
    finally:
        torch.use_deterministic_algorithms(False)
    x, w, b = dense.make(torch.float32, "cuda")
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with _tf32_off():
            check(x, w, b, dense.kwargs(), what="IEEE with TF32 matmul ")
        assert "cublas_gemm" not in convt2d.last_algorithms().values(), convt2d.last_algorithms()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


# The forward as one GEMM over all taps and a col2im pass (gemm_col2im; the GEMM on cuBLAS, or
# for fp32 on the tensor-core implicit GEMM where it takes the channels); the gradients with the
# tap gather and cuBLAS forced, which they run where the gather takes the problem (tensor cores,
# channels in 16-byte chunks), else the planner's choices. Taps that never overlap: 1x1 kernels
# at strides 2 and 3 (padding, output padding), a U-Net k=2 s=2, non-square kernel and stride
# with padding, k=3 s=3 with padding, a 1x1 kernel with dilation (ignored), one output channel.
# Taps that overlap (up to 16 per output): k=3 s=2 into 3 channels, k=4 s=2 with dilation 2 and
# padding 3, stride 1 with k=5, k=(6,4) s=(3,2) with output padding, dilation (2,3) stride (3,1)
# into one channel with Cin not a multiple of 4 (cuBLAS for fp32 too), k=16 s=8 on 45 images
# (chunks of 20, the last of 5; fp64 of 10), a 1x1 kernel at stride 1 with padding (cropped).
# 2x2 images at batch 64 (NCHW: cuBLAS's per-image GEMMs would re-read the weight 64 times, so
# x is copied channels-last for one GEMM over all pixels; col2im_split's x_copy), with Cin in
# 16-byte chunks and not (cuBLAS for fp32 too).
# 16-bit overlapping taps need mm / bmm with an fp32 out_dtype (torch 2.8+).
_MM_FP32_OUT = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8)

_COL2IM_CFGS = [
    Cfg(2, 24, 16, 7, 5, k=1, stride=2, bias=True),
    Cfg(3, 8, 12, 5, 6, k=1, stride=3, padding=1, output_padding=2, bias=False),
    Cfg(2, 16, 8, 6, 7, k=2, stride=2, bias=True),
    Cfg(2, 12, 20, 5, 4, k=(2, 1), stride=(3, 2), padding=(1, 0), output_padding=(1, 1)),
    Cfg(1, 16, 24, 4, 5, k=3, stride=3, padding=1, bias=True),
    Cfg(2, 8, 1, 6, 6, k=1, stride=2, dilation=2, bias=True),
    Cfg(2, 64, 3, 9, 7, k=3, stride=2, padding=1, output_padding=1, bias=True),
    Cfg(2, 32, 4, 8, 8, k=4, stride=2, padding=3, dilation=2, bias=True),
    Cfg(1, 24, 5, 6, 9, k=5, stride=1, padding=2, bias=False),
    Cfg(2, 16, 6, 5, 4, k=(6, 4), stride=(3, 2), padding=(2, 1), output_padding=(2, 1)),
    Cfg(3, 10, 1, 5, 6, k=3, stride=(3, 1), padding=(1, 2), dilation=(2, 3), bias=True),
    Cfg(45, 8, 4, 20, 20, k=16, stride=8, padding=7, output_padding=4, bias=True),
    Cfg(2, 12, 7, 5, 6, k=1, stride=1, padding=(1, 2), bias=True),
    Cfg(64, 256, 128, 2, 2, k=3, padding=1, bias=True),
    Cfg(64, 21, 512, 2, 2, k=5, dilation=2),
]


def test_planner_small_phase_and_depthwise_choices(monkeypatch):
    """Strided 1x1 layers on small images with 32+ input channels: the tensor-core implicit
    GEMM, not the direct kernels (rules or cost model); a depthwise layer stays on the depthwise kernel (the cost
    model's narrow-kernel time is not trusted there)."""
    _algo(monkeypatch, None)
    small = Cfg(4, 96, 64, 13, 13, k=1, stride=2, bias=True)
    for dt in (torch.float32, torch.bfloat16):
        x, w, b = small.make(dt, "cuda")
        check(x, w, b, small.kwargs(), what=f"small phase {dt} ", backward=False)
        assert _ran("fwd").startswith("implicit_gemm"), convt2d.last_algorithms()
    dw = Cfg(64, 256, 256, 13, 13, k=1, stride=2, dilation=2, groups=256, bias=True)
    for dt in (torch.float32, torch.bfloat16):
        x, w, b = dw.make(dt, "cuda")
        check(x, w, b, dw.kwargs(), what=f"depthwise {dt} ", backward=False)
        assert _ran("fwd") == "depthwise", convt2d.last_algorithms()


def test_single_input_channel_dense_layer_runs_cublas(monkeypatch):
    """One input channel to 64 outputs, a 1x1 kernel at stride 1, channels-last: the forward is
    a GEMM per image with K = 1 (x of one channel is NCHW-contiguous too, so the output is
    NCHW), the gradients one GEMM over all pixels each (matrix-vector products); cuBLAS runs
    them near the bytes' floor, the planner takes it in every pass, and the results are right."""
    _algo(monkeypatch, None)
    cfg = Cfg(8, 1, 64, 32, 32, k=1, bias=False)
    for dt in (torch.float32, torch.bfloat16):
        x, w, b = cfg.make(dt, "cuda")
        x = x.contiguous(memory_format=torch.channels_last)
        gy = torch.randn(cfg.out_shape(), device="cuda").to(dt).contiguous(
            memory_format=torch.channels_last)
        check(x, w, b, cfg.kwargs(), gy=gy, what=f"1 -> 64 k1 {dt} ")
        convt2d.forward(x, w, b, **cfg.kwargs())
        assert _ran("fwd") == "cublas_gemm", convt2d.last_algorithms()
        torch.ops.convt2d.backward(gy, x, w, *_op_args(cfg.kwargs()), [True, True, False])
        assert (_ran("dgrad"), _ran("wgrad")) == ("cublas_gemm",) * 2, convt2d.last_algorithms()


def test_narrow_images_leave_the_direct_kernels(monkeypatch):
    """A layer on images 2 columns wide (3 output columns, stride 2: phases of 1-2 columns):
    the direct kernels' 32-column tiles would be mostly idle, so the forward runs the implicit
    GEMM (16 -> 21 channels, k=(9,1)); forced, the direct kernels are still right."""
    _algo(monkeypatch, None)
    cfg = Cfg(32, 16, 21, 128, 2, k=(9, 1), stride=2, padding=(4, 0))
    for dt in (torch.float32, torch.bfloat16):
        x, w, b = cfg.make(dt, "cuda")
        check(x, w, b, cfg.kwargs(), what=f"narrow {dt} ", backward=False)
        assert _ran("fwd").startswith("implicit_gemm"), convt2d.last_algorithms()
    for algo in ("direct_tensorop", "direct_simt"):
        _algo(monkeypatch, f"fwd:{algo}")
        x, w, b = cfg.make(torch.bfloat16, "cuda")
        check(x, w, b, cfg.kwargs(), what=f"narrow {algo} ", backward=False)
        assert _ran("fwd") == algo, convt2d.last_algorithms()


def test_planner_channels_last_gemm(monkeypatch):
    """Channels-last x with 32+ outputs per group and whole 16-byte input-channel chunks: the
    implicit GEMM where the bytes bound the layer (few reduced channels per output), not the
    direct kernels (planner cl_gemm), in both dtypes; the output matches in either layout."""
    _algo(monkeypatch, None)
    cfg = Cfg(4, 16, 64, 16, 16, k=3, stride=2, padding=1, bias=True)
    for dt in (torch.float32, torch.bfloat16):
        x, w, b = cfg.make(dt, "cuda")
        check(x, w, b, cfg.kwargs(), what=f"nchw {dt} ", backward=False)
        x = x.contiguous(memory_format=torch.channels_last)
        check(x, w, b, cfg.kwargs(), what=f"channels-last {dt} ", backward=False)
        assert _ran("fwd") == "implicit_gemm", convt2d.last_algorithms()


def test_tap_gathered_planned(monkeypatch):
    """The backward's tap-gathered 1x1 problem stays on the kernels (not cuBLAS; checked in bf16
    and fp32); kernel == stride on small images with 32+ input channels is not gathered; few
    outputs with unaligned gathered columns are, in either grad_output layout, where x has
    2^19+ elements; 9+ outputs with unaligned columns and NCHW grad_output are where the strided
    grad_weight would pad the channels."""
    _algo(monkeypatch, None)
    big = Cfg(2, 64, 32, 32, 32, k=2, stride=2)
    for dt in (torch.bfloat16, torch.float32):
        x, w, b = big.make(dt, "cuda")
        check(x, w, b, big.kwargs(), what=f"gathered {dt} ")
        assert _ran("bwd") == "tap_gather" and "cublas_gemm" not in (_ran("dgrad"), _ran("wgrad")), \
            convt2d.last_algorithms()
    # kernel == stride on images of <= 256 pixels with 32+ input channels: no gather at all
    patch = Cfg(16, 64, 32, 8, 8, k=2, stride=2)
    x, w, b = patch.make(torch.bfloat16, "cuda")
    check(x, w, b, patch.kwargs(), what="strided small ")
    assert _ran("bwd") == "strided", convt2d.last_algorithms()
    # ... but a smaller kernel than the stride is
    k1 = Cfg(16, 64, 32, 8, 8, k=1, stride=2)
    x, w, b = k1.make(torch.bfloat16, "cuda")
    check(x, w, b, k1.kwargs(), what="gathered k1 ")
    assert _ran("bwd") == "tap_gather", convt2d.last_algorithms()
    # Few outputs (an RGB head at kernel == stride, 27 gathered columns: not whole chunks) in
    # either grad_output layout, x at least 2^19 elements; a smaller such layer stays strided.
    rgb = Cfg(1, 512, 3, 32, 32, k=3, stride=3)
    for go_layout in (torch.contiguous_format, torch.channels_last):
        x, w, b = rgb.make(torch.bfloat16, "cuda")
        ho, wo = rgb.out_hw()
        gy = torch.randn(1, 3, ho, wo, device="cuda").to(torch.bfloat16)
        gy = gy.contiguous(memory_format=go_layout)
        check(x, w, b, rgb.kwargs(), gy=gy, what=f"gathered few outputs {go_layout} ")
        assert _ran("bwd") == "tap_gather", convt2d.last_algorithms()
    small = Cfg(1, 256, 3, 16, 32, k=3, stride=3)
    x, w, b = small.make(torch.bfloat16, "cuda")
    check(x, w, b, small.kwargs(), what="strided few outputs small ")
    assert _ran("bwd") == "strided", convt2d.last_algorithms()
    # 9+ outputs with unaligned columns (21), NCHW: gathered where the strided grad_weight would
    # pad the channels (tensorop_padded), in both dtypes; strided where it would not.
    # (the first layer's strided grad_weight pads, the second's does not: cost model)
    for cfg, padded in ((Cfg(4, 16, 21, 40, 40, k=3, stride=3, bias=True), True),
                        (Cfg(2, 128, 21, 24, 20, k=1, stride=2), False)):
        for dt in (torch.bfloat16, torch.float32):
            _algo(monkeypatch, "bwd:strided")
            x, w, b = cfg.make(dt, "cuda")
            check(x, w, b, cfg.kwargs(), what=f"strided {cfg.id()} {dt} ")
            assert (_ran("wgrad") == "tensorop_padded") == padded, convt2d.last_algorithms()
            _algo(monkeypatch, None)
            check(x, w, b, cfg.kwargs(), what=f"default {cfg.id()} {dt} ")
            assert _ran("bwd") == ("tap_gather" if padded else "strided"), convt2d.last_algorithms()


def test_gemm_col2im_planned(monkeypatch):
    """The planner takes the GEMM over all taps + col2im for taps that never overlap where x's
    channels dominate (256 or more, at least 8 per output column of a pixel) into an NCHW
    output, and not into a channels-last one, not for fewer input channels, not on cuBLAS under
    torch's deterministic mode; for taps that overlap, few outputs from many input channels
    (col2im_preferred); and where the cost model predicts it 2x faster than the rules' choice
    (TF32 allowed or 16-bit)."""
    _algo(monkeypatch, None)
    rgb = Cfg(2, 512, 3, 8, 6, k=2, stride=2, bias=True)
    for layout in ("nchw", "channels_last"):
        for dt in (torch.float32, torch.bfloat16):
            x, w, b = rgb.make(dt, "cuda")
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            check(x, w, b, rgb.kwargs(), what=f"col2im planned {layout} {dt} ")
            assert (_ran("fwd") == "gemm_col2im") == (layout == "nchw"), \
                convt2d.last_algorithms()
    few = Cfg(2, 128, 16, 8, 8, k=1, stride=2)
    x, w, b = few.make(torch.bfloat16, "cuda")
    check(x, w, b, few.kwargs(), what="col2im declined ")
    assert _ran("fwd") != "gemm_col2im", convt2d.last_algorithms()
    # Taps that overlap: few outputs from many input channels (a keypoint / RGB head) in
    # either layout; not where the result would outweigh x (a large kernel into many outputs).
    head = Cfg(4, 384, 4, 16, 16, k=7, stride=2, bias=True)
    for layout in ("nchw", "channels_last"):
        for dt in (torch.float32, torch.bfloat16) if _MM_FP32_OUT else (torch.float32,):
            x, w, b = head.make(dt, "cuda")
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            check(x, w, b, head.kwargs(), what=f"col2im head {layout} {dt} ", backward=False)
            assert _ran("fwd") == "gemm_col2im", convt2d.last_algorithms()
    # ... in fp32 too with fewer than 256 input channels, where the narrow kernel can run
    rgb96 = Cfg(4, 96, 3, 64, 64, k=3, stride=2, padding=1, output_padding=1, bias=True)
    x, w, b = rgb96.make(torch.float32, "cuda")
    check(x, w, b, rgb96.kwargs(), what="col2im head fp32 96 ", backward=False)
    assert _ran("fwd") == "gemm_col2im", convt2d.last_algorithms()
    big = Cfg(2, 64, 56, 16, 16, k=9, stride=2)
    x, w, b = big.make(torch.bfloat16, "cuda")
    check(x, w, b, big.kwargs(), what="col2im declined (overlap) ", backward=False)
    assert _ran("fwd") != "gemm_col2im", convt2d.last_algorithms()
    # The cost model's choice where it predicts 2x over the rules': a tiny input under a large
    # dilated kernel (the per-phase implicit GEMM runs every tap over mostly cropped rows; the
    # GEMM over all taps computes only the products that exist), fp32 with TF32 allowed.
    tiny_in = Cfg(8, 1024, 56, 2, 64, k=(9, 3), stride=2, dilation=2)
    x, w, b = tiny_in.make(torch.float32, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        check(x, w, b, tiny_in.kwargs(), what="col2im by the cost model ", backward=False)
    assert _ran("fwd") == "gemm_col2im", convt2d.last_algorithms()
    # A tiny 16-bit layer with many input channels (a pix2pix bottleneck): taken in bf16 (and
    # fp16), not in fp32, not for a strided 1x1 kernel.
    if _MM_FP32_OUT:
        tiny = Cfg(2, 256, 64, 4, 4, k=4, stride=2, padding=1)
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            x, w, b = tiny.make(dt, "cuda")
            check(x, w, b, tiny.kwargs(), what=f"col2im tiny {dt} ", backward=False)
            assert (_ran("fwd") == "gemm_col2im") == (dt != torch.float32), \
                convt2d.last_algorithms()
        one = Cfg(2, 256, 64, 4, 4, k=1, stride=2)
        x, w, b = one.make(torch.bfloat16, "cuda")
        check(x, w, b, one.kwargs(), what="col2im tiny 1x1 ", backward=False)
        assert _ran("fwd") != "gemm_col2im", convt2d.last_algorithms()
    x, w, b = rgb.make(torch.bfloat16, "cuda")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        check(x, w, b, rgb.kwargs(), what="col2im deterministic ")
        assert _ran("fwd") != "gemm_col2im", convt2d.last_algorithms()
    finally:
        torch.use_deterministic_algorithms(was)


@pytest.mark.parametrize("dtype", list(_DENSE_DTYPES))
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("cfg", _COL2IM_CFGS, ids=lambda c: c.id())
def test_gemm_col2im_forced(cfg, dtype, layout, monkeypatch):
    (kh, kw), (sh, sw), (dh, dw) = cfg.k, cfg.stride, cfg.dilation
    overlap = (kh - 1) * dh >= sh or (kw - 1) * dw >= sw
    if dtype in ("bf16", "fp16") and overlap and not _MM_FP32_OUT:
        pytest.skip("16-bit overlapping taps sum an fp32 GEMM result: torch 2.8+ (mm out_dtype)")
    _algo(monkeypatch, "fwd:gemm_col2im,dgrad:cublas_gemm,wgrad:cublas_gemm,bwd:tap_gather")
    x, w, b = cfg.make(_DENSE_DTYPES[dtype], "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dtype != "fp32-ieee"):
        check(x, w, b, cfg.kwargs(), what=f"gemm col2im {layout} {dtype} ")
    assert _ran("fwd") == "gemm_col2im", convt2d.last_algorithms()
