"""gradcheck (float64) and torch.library.opcheck of the registered ops."""
import pytest
import torch

import convt2d
from conftest import DEVICES, Cfg

GRADCHECK_CFGS = [
    Cfg(2, 4, 6, 4, 3, k=(3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
        dilation=(1, 2), groups=2, bias=True),
    Cfg(1, 3, 2, 3, 5, k=(2, 3), stride=3, padding=(0, 1), output_padding=(2, 1), bias=False),
    Cfg(2, 2, 3, 1, 2, k=(4, 1), stride=(1, 2), dilation=(2, 1), bias=True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cfg", GRADCHECK_CFGS, ids=[c.id() for c in GRADCHECK_CFGS])
def test_gradcheck(device, cfg):
    x, w, b = cfg.make(torch.float64, device)
    inputs = tuple(t.requires_grad_() for t in (x, w, b) if t is not None)

    def fn(*t):
        return convt2d.forward(t[0], t[1], t[2] if len(t) > 2 else None, **cfg.kwargs())

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_unbatched_channels_last_weight(device):
    cfg = GRADCHECK_CFGS[0]
    x, w, b = cfg.make(torch.float64, device)
    x = x[0].requires_grad_()
    w = w.contiguous(memory_format=torch.channels_last).requires_grad_()
    b = b.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w, b: convt2d.forward(x, w, b, **cfg.kwargs()), (x, w, b), eps=1e-6,
        atol=1e-7, rtol=1e-5)


def _op_args(cfg: Cfg, dtype, device, requires_grad: bool, x_cl=False):
    x, w, b = cfg.make(dtype, device)
    if x_cl:
        x = x.contiguous(memory_format=torch.channels_last)
    if requires_grad:
        x.requires_grad_()
        w.requires_grad_()
        if b is not None:
            b.requires_grad_()
    return (x, w, b, list(cfg.stride), list(cfg.padding), list(cfg.output_padding), cfg.groups,
            list(cfg.dilation))


OPCHECK_CFGS = [
    (Cfg(2, 4, 6, 5, 4, k=(3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
         dilation=(1, 2), groups=2, bias=True), False),
    (Cfg(1, 3, 4, 3, 3, k=2, stride=2, bias=False), False),
    (Cfg(2, 4, 4, 4, 5, k=3, stride=1, padding=1, bias=True), True),
]
OPCHECK_IDS = [c.id() + ("_cl" if cl else "") for c, cl in OPCHECK_CFGS]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cfg,x_cl", OPCHECK_CFGS, ids=OPCHECK_IDS)
@pytest.mark.parametrize("requires_grad", [True, False], ids=["grad", "nograd"])
def test_opcheck_forward(device, cfg, x_cl, requires_grad):
    args = _op_args(cfg, torch.float32, device, requires_grad, x_cl)
    torch.library.opcheck(torch.ops.convt2d.forward.default, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cfg,x_cl", OPCHECK_CFGS, ids=OPCHECK_IDS)
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False),
                                  (False, True, True), (False, False, True)],
                         ids=["xwb", "x", "wb", "b"])
def test_opcheck_backward(device, cfg, x_cl, mask):
    x, w, _b, *rest = _op_args(cfg, torch.float32, device, False, x_cl)
    ho, wo = cfg.out_hw()
    gy = torch.randn(cfg.N, cfg.Cout, ho, wo, device=device)
    torch.library.opcheck(torch.ops.convt2d.backward.default, (gy, x, w, *rest, list(mask)))


@pytest.mark.parametrize("device", DEVICES)
def test_backward_op_values_and_empty_placeholders(device):
    """torch.ops.convt2d.backward directly: gradients match torch's, masked ones are [0]."""
    cfg = OPCHECK_CFGS[0][0]
    x, w, b, *rest = _op_args(cfg, torch.float64, device, False)
    ho, wo = cfg.out_hw()
    gy = torch.randn(cfg.N, cfg.Cout, ho, wo, device=device, dtype=torch.float64)
    gi, gw, gb = torch.ops.convt2d.backward(gy, x, w, *rest, [True, True, True])
    ref = torch.ops.aten.convolution_backward(
        gy, x, w, [cfg.Cout], list(cfg.stride), list(cfg.padding), list(cfg.dilation), True,
        list(cfg.output_padding), cfg.groups, [True, True, True])
    for g, r in zip((gi, gw, gb), ref):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)
    gi, gw, gb = torch.ops.convt2d.backward(gy, x, w, *rest, [False, True, False])
    assert gi.shape == (0,) and gb.shape == (0,)
    torch.testing.assert_close(gw, ref[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_raises(device):
    """First order only: differentiating the gradient raises (convt2d::backward's autograd is
    the not-implemented fallback) instead of silently treating it as constant. Which gradients
    autograd asks for decides what convt2d::backward computes: x alone, w alone, bias alone."""
    cfg = GRADCHECK_CFGS[0]
    x, w, b = cfg.make(torch.float64, device)
    x.requires_grad_()
    w.requires_grad_()
    b.requires_grad_()
    y = convt2d.forward(x, w, b, **cfg.kwargs())
    (gx,) = torch.autograd.grad(y.sum(), [x], create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        gx.sum().backward()
    for t in (x, w, b):
        y = convt2d.forward(x, w, b, **cfg.kwargs())
        (g,) = torch.autograd.grad(y.square().sum(), [t])
        ref = torch.nn.functional.conv_transpose2d(x, w, b, **cfg.kwargs())
        (r,) = torch.autograd.grad(ref.square().sum(), [t])
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("device", DEVICES)
def test_graph_only_where_a_gradient_is_wanted(device):
    """The forward records its autograd node exactly when torch's would: not under no_grad or
    inference_mode or with no input that requires grad (the call then skips the autograd
    Function), and whenever any one of x, w, bias requires grad, whose gradient is then
    torch's."""
    cfg = GRADCHECK_CFGS[0]
    x, w, b = cfg.make(torch.float64, device)
    y = convt2d.forward(x, w, b, **cfg.kwargs())
    assert not y.requires_grad and y.grad_fn is None
    for which in range(3):
        ts = [t.detach().clone() for t in (x, w, b)]
        ts[which].requires_grad_()
        with torch.no_grad():
            assert convt2d.forward(*ts, **cfg.kwargs()).grad_fn is None
        with torch.inference_mode():
            assert not convt2d.forward(*ts, **cfg.kwargs()).requires_grad
        y = convt2d.forward(*ts, **cfg.kwargs())
        assert y.requires_grad and y.grad_fn is not None
        gy = torch.randn_like(y)
        (g,) = torch.autograd.grad(y, [ts[which]], gy)
        rs = [t.detach().clone() for t in (x, w, b)]
        rs[which].requires_grad_()
        ref = torch.nn.functional.conv_transpose2d(*rs, **cfg.kwargs())
        (r,) = torch.autograd.grad(ref, [rs[which]], gy)
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_never_silently_wrong(device):
    """Forward-mode AD (a dual input, torch.func.jvp / jacfwd) either raises or gives torch's
    tangent: never a call that drops the tangent (convt2d has no jvp; the call with no input
    requiring grad must not skip the autograd Function's check for it)."""
    import torch.autograd.forward_ad as fwAD

    cfg = GRADCHECK_CFGS[0]
    x, w, b = cfg.make(torch.float64, device)
    tx = torch.randn_like(x)
    kw = cfg.kwargs()
    ref = torch.func.jvp(lambda a: torch.nn.functional.conv_transpose2d(a, w, b, **kw),
                         (x,), (tx,))[1]

    def dual(no_grad):
        with fwAD.dual_level():
            with torch.no_grad() if no_grad else torch.enable_grad():
                y = convt2d.forward(fwAD.make_dual(x, tx), w, b, **kw)
            return fwAD.unpack_dual(y).tangent

    calls = {
        "dual": lambda: dual(False),
        "dual_no_grad": lambda: dual(True),
        "jvp": lambda: torch.func.jvp(lambda a: convt2d.forward(a, w, b, **kw), (x,), (tx,))[1],
    }
    for name, call in calls.items():
        try:
            got = call()
        except RuntimeError:
            continue
        assert got is not None, f"{name}: the tangent was dropped"
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10, msg=name)
