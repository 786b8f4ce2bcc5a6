"""Memory formats, strided views, unbatched / zero-batch input, every dtype, gradient masks."""
import pytest
import torch
import torch.nn.functional as F

import convt2d
from conftest import (CPU_DTYPES, CUDA_DTYPES, DEVICES, Cfg, assert_close, check, check_cfg,
                      dtype_id, ours, poison, reference, tolerance)

CL = torch.channels_last
BASE = Cfg(2, 6, 8, 7, 9, k=(3, 4), stride=(2, 1), padding=(1, 2), output_padding=(1, 0),
           dilation=(1, 2), groups=2, bias=True)


def _tf32_off(device):
    return torch.backends.cudnn.flags(enabled=True, allow_tf32=False)


def _dtypes(device):
    return CPU_DTYPES if device == "cpu" else CUDA_DTYPES


ALL_DEVICE_DTYPES = ([("cpu", d) for d in CPU_DTYPES]
                     + [pytest.param("cuda", d, marks=pytest.mark.cuda) for d in CUDA_DTYPES])
DD_IDS = [f"cpu-{dtype_id(d)}" for d in CPU_DTYPES] + [f"cuda-{dtype_id(d)}" for d in CUDA_DTYPES]


# ------------------------------------------------------------------------- memory formats

@pytest.mark.parametrize("device,dtype", ALL_DEVICE_DTYPES, ids=DD_IDS)
@pytest.mark.parametrize("x_cl,w_cl", [(False, False), (True, False), (False, True),
                                       (True, True)], ids=["x_nchw-w_nchw", "x_cl-w_nchw",
                                                           "x_nchw-w_cl", "x_cl-w_cl"])
def test_channels_last_values_and_output_format(device, dtype, x_cl, w_cl):
    x, w, b = BASE.make(dtype, device)
    if x_cl:
        x = x.contiguous(memory_format=CL)
    if w_cl:
        w = w.contiguous(memory_format=CL)
    with _tf32_off(device):
        out, grads = check(x, w, b, BASE.kwargs())
        torch_out = F.conv_transpose2d(x, w, b, **BASE.kwargs())
    assert out.is_contiguous(memory_format=CL) == torch_out.is_contiguous(memory_format=CL), \
        f"channels_last output: ours {out.is_contiguous(memory_format=CL)}, " \
        f"torch {torch_out.is_contiguous(memory_format=CL)}"
    assert out.is_contiguous() == torch_out.is_contiguous(), \
        f"contiguous output: ours {out.is_contiguous()}, torch {torch_out.is_contiguous()}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_cl,w_cl", [(True, False), (False, True), (True, True)],
                         ids=["x_cl", "w_cl", "both_cl"])
def test_channels_last_fake_matches_real(device, x_cl, w_cl):
    """The fake (meta) kernel must predict the real output's shape and strides."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    x, w, b = BASE.make(torch.float32, device)
    if x_cl:
        x = x.contiguous(memory_format=CL)
    if w_cl:
        w = w.contiguous(memory_format=CL)
    real = convt2d.forward(x, w, b, **BASE.kwargs())
    with FakeTensorMode() as mode:
        fx, fw, fb = (mode.from_tensor(t) for t in (x, w, b))
        fake = convt2d.forward(fx, fw, fb, **BASE.kwargs())
    assert fake.shape == real.shape
    assert fake.stride() == real.stride(), f"fake strides {fake.stride()} != {real.stride()}"


# ------------------------------------------------------------------------ strided views

def _views(x, w, b):
    """(name, x, w, b) with non-contiguous views of the same values as contiguous tensors."""
    N, C, H, W = x.shape
    out = []
    # transposed view: a (N, C, W, H) buffer seen through .transpose(2, 3)
    out.append(("x_transposed", x.transpose(2, 3).contiguous().transpose(2, 3), w, b))
    # sliced view: every other channel / column of a larger buffer
    big = torch.randn(N, 2 * C, H + 3, 2 * W, device=x.device).to(x.dtype)
    big[:, ::2, 1:H + 1, ::2] = x
    out.append(("x_sliced", big[:, ::2, 1:H + 1, ::2], w, b))
    # batch-strided (stride-0 batch): expand one image
    out.append(("x_expanded", x[:1].expand(N, C, H, W), w, b))
    # weight: permuted buffer and a slice of a larger one
    wp = w.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)
    out.append(("w_permuted", x, wp, b))
    wbig = torch.randn(w.shape[0], w.shape[1], w.shape[2] + 2, w.shape[3] * 2,
                       device=w.device).to(w.dtype)
    wbig[:, :, 1:-1, ::2] = w
    out.append(("w_sliced", x, wbig[:, :, 1:-1, ::2], b))
    out.append(("w_flipped_strides", x, w.transpose(2, 3).contiguous().transpose(2, 3), b))
    # bias: strided slice
    bbig = torch.randn(2 * b.numel(), device=b.device).to(b.dtype)
    bbig[::2] = b
    out.append(("b_strided", x, w, bbig[::2]))
    # everything at once
    out.append(("all_views", big[:, ::2, 1:H + 1, ::2], wbig[:, :, 1:-1, ::2], bbig[::2]))
    return out


VIEW_NAMES = [n for n, *_ in _views(*BASE.make(torch.float32, "cpu"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("view", VIEW_NAMES)
def test_non_contiguous_inputs(device, dtype, view):
    x, w, b = BASE.make(dtype, device)
    name, xv, wv, bv = [v for v in _views(x, w, b) if v[0] == view][0]
    if view == "x_expanded":
        x = xv.contiguous()
    assert torch.equal(xv, x) or view == "x_expanded"
    assert not (xv.is_contiguous() and wv.is_contiguous() and bv.is_contiguous())
    with _tf32_off(device):
        out_v, grads_v = check(xv, wv, bv, BASE.kwargs())
        out_c, _ = ours(xv.contiguous(), wv.contiguous(), bv.contiguous(), BASE.kwargs())
    # a view must give the values of its contiguous copy
    assert_close(out_v, out_c.double(), dtype, device, "view vs contiguous")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gy_kind", ["channels_last", "transposed", "expanded_sum"])
def test_non_contiguous_grad_output(device, gy_kind):
    dtype = torch.float64
    x, w, b = BASE.make(dtype, device)
    ho, wo = BASE.out_hw()
    shape = (BASE.N, BASE.Cout, ho, wo)
    if gy_kind == "channels_last":
        gy = torch.randn(shape, device=device, dtype=dtype).contiguous(memory_format=CL)
    elif gy_kind == "transposed":
        gy = torch.randn(BASE.N, BASE.Cout, wo, ho, device=device, dtype=dtype).transpose(2, 3)
    else:  # what out.sum().backward() feeds the op: an expanded scalar (all strides 0)
        gy = torch.ones((), device=device, dtype=dtype).expand(shape)
    assert not gy.is_contiguous()
    check(x, w, b, BASE.kwargs(), gy=gy)


@pytest.mark.parametrize("device", DEVICES)
def test_sum_backward(device):
    """y.sum().backward() (stride-0 upstream gradient) through .grad accumulation."""
    x, w, b = BASE.make(torch.float64, device)
    xl, wl, bl = (t.clone().requires_grad_() for t in (x, w, b))
    convt2d.forward(xl, wl, bl, **BASE.kwargs()).sum().backward()
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    F.conv_transpose2d(xr, wr, br, **BASE.kwargs()).sum().backward()
    for a, r, n in ((xl, xr, "x"), (wl, wr, "w"), (bl, br, "b")):
        assert_close(a.grad, r.grad, torch.float64, device, f"{n}.grad")


# ---------------------------------------------------------------- unbatched / zero batch

@pytest.mark.parametrize("device,dtype", ALL_DEVICE_DTYPES, ids=DD_IDS)
def test_unbatched_input(device, dtype):
    x, w, b = BASE.make(dtype, device)
    x3 = x[0]
    assert x3.dim() == 3
    with _tf32_off(device):
        out, grads = check(x3, w, b, BASE.kwargs())
    ho, wo = BASE.out_hw()
    assert out.shape == (BASE.Cout, ho, wo)
    assert grads[0].shape == x3.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("x_cl", [False, True], ids=["nchw", "cl"])
def test_zero_batch_forward_backward(device, dtype, x_cl):
    cfg = BASE.scaled(N=0)
    x, w, b = cfg.make(dtype, device)
    if x_cl:
        x = x.contiguous(memory_format=CL)
    gy = torch.randn(cfg.out_shape(), device=device).to(dtype)
    out, grads = ours(x, w, b, cfg.kwargs(), gy)
    ref_out, ref_grads = reference(x, w, b, cfg.kwargs(), gy)
    torch_out = F.conv_transpose2d(x, w, b, **cfg.kwargs())
    assert out.shape == torch_out.shape == cfg.out_shape()
    assert out.dtype == dtype and out.device.type == device
    assert grads[0].shape == x.shape
    # no batch: weight and bias gradients are exactly zero (as torch gives), not garbage
    assert grads[1].shape == w.shape and torch.count_nonzero(grads[1]) == 0
    assert grads[2].shape == b.shape and torch.count_nonzero(grads[2]) == 0
    assert torch.equal(ref_grads[1], torch.zeros_like(ref_grads[1]))


# ------------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("device,dtype", ALL_DEVICE_DTYPES, ids=DD_IDS)
def test_every_dtype(device, dtype):
    cfg = Cfg(3, 16, 12, 11, 10, k=(3, 3), stride=2, padding=1, output_padding=1, bias=True)
    with _tf32_off(device):
        out, _ = check_cfg(cfg, dtype, device)
    assert out.dtype == dtype


@pytest.mark.cuda
@pytest.mark.parametrize("allow_tf32", [False, True], ids=["notf32", "tf32"])
def test_cuda_float32_tf32_flag(allow_tf32):
    """float32 is checked at 1e-5 with TF32 off and 5e-3 with it on (torch's cudnn flag)."""
    cfg = Cfg(4, 64, 48, 24, 20, k=(3, 5), stride=(2, 1), padding=1, bias=True)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=allow_tf32):
        assert tolerance(torch.float32, "cuda") == (5e-3 if allow_tf32 else 1e-5)
        check_cfg(cfg, torch.float32, "cuda")


# -------------------------------------------------------------------------- grad masks

MASKS = [(True, False, False), (False, True, False), (False, False, True),
         (True, False, True), (False, True, True), (True, True, False)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "".join("xwb"[i] for i in range(3) if m[i]))
def test_partial_requires_grad(device, mask):
    """Only the requested gradients are computed, and they are right."""
    dtype = torch.float64
    x, w, b = BASE.make(dtype, device)
    gy = torch.randn(BASE.out_shape(), device=device, dtype=dtype)
    _, ref_grads = reference(x, w, b, BASE.kwargs(), gy)
    leaves = [t.clone().requires_grad_(m) for t, m in zip((x, w, b), mask)]
    out = convt2d.forward(*leaves, **BASE.kwargs())
    wanted = [t for t in leaves if t.requires_grad]
    got = torch.autograd.grad(out, wanted, gy)
    refs = [r for r, m in zip(ref_grads, mask) if m]
    for g, r in zip(got, refs):
        assert_close(g, r, dtype, device, "grad")


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_forward_has_no_graph(device):
    x, w, b = BASE.make(torch.float32, device)
    w.requires_grad_()
    with torch.no_grad():
        out = convt2d.forward(x, w, b, **BASE.kwargs())
    assert out.grad_fn is None and not out.requires_grad
