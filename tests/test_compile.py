"""torch.compile(fullgraph=True) and torch.export of convt2d.

On the CPU the "aot_eager" backend is used (dynamo + AOTAutograd tracing through the fake
kernels and the autograd registration, no code generation): inductor's C++ compile of the
surrounding graph is slow on a 2-core machine and adds nothing convt2d-specific. On CUDA the
default inductor backend runs as well.
"""
import copy

import pytest
import torch
from torch import nn

import convt2d
from conftest import Cfg, assert_close, reference

CFG = Cfg(2, 4, 6, 5, 7, k=(3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
          dilation=(1, 2), groups=2, bias=True)

DEV_BACKENDS = [("cpu", "aot_eager"),
                pytest.param("cuda", "aot_eager", marks=pytest.mark.cuda),
                pytest.param("cuda", "inductor", marks=pytest.mark.cuda)]
DB_IDS = ["cpu-aot_eager", "cuda-aot_eager", "cuda-inductor"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _tf32_off():
    return torch.backends.cudnn.flags(enabled=True, allow_tf32=False)


@pytest.mark.parametrize("device,backend", DEV_BACKENDS, ids=DB_IDS)
def test_compile_function_forward_backward(device, backend):
    kw = CFG.kwargs()

    def f(x, w, b):
        return torch.relu(convt2d.forward(x, w, b, **kw)) * 2.0 + 1.0

    cf = torch.compile(f, fullgraph=True, backend=backend)
    x, w, b = CFG.make(torch.float32, device)
    gy = torch.randn(CFG.out_shape(), device=device)
    with _tf32_off():
        xl, wl, bl = (t.clone().requires_grad_() for t in (x, w, b))
        out = cf(xl, wl, bl)
        grads = torch.autograd.grad(out, (xl, wl, bl), gy)
        xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
        ref = torch.relu(torch.nn.functional.conv_transpose2d(xr, wr, br, **kw)) * 2.0 + 1.0
        ref_grads = torch.autograd.grad(ref, (xr, wr, br), gy.double())
        assert_close(out, ref, torch.float32, device, "compiled forward")
        for n, g, r in zip(("gx", "gw", "gb"), grads, ref_grads):
            assert_close(g, r, torch.float32, device, f"compiled {n}")


@pytest.mark.parametrize("device,backend", DEV_BACKENDS, ids=DB_IDS)
def test_compile_module_forward_backward(device, backend):
    torch.manual_seed(0)
    model = nn.Sequential(
        convt2d.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1),
        nn.ReLU(),
        convt2d.ConvTranspose2d(8, 6, (2, 3), stride=(1, 2), groups=2, bias=False),
    ).to(device)
    # the reference: the same model made of torch's nn.ConvTranspose2d, in float64
    ref_model = copy.deepcopy(model).double()
    for m in ref_model.modules():
        if isinstance(m, nn.ConvTranspose2d):
            m.__class__ = nn.ConvTranspose2d
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(2, 4, 5, 6, device=device)
    with _tf32_off():
        out = compiled(x)
        out_r = ref_model(x.double())
        gy = torch.randn_like(out)
        out.backward(gy)
        out_r.backward(gy.double())
        assert_close(out, out_r, torch.float32, device, "compiled module")
        for (n, p), (_, pr) in zip(model.named_parameters(), ref_model.named_parameters()):
            assert p.grad is not None, n
            assert_close(p.grad, pr.grad, torch.float32, device, f"grad {n}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_compile_dynamic_shapes(device):
    """dynamic=True: one graph serves several batch/spatial sizes (fake kernel symbolic)."""
    kw = CFG.kwargs()
    cf = torch.compile(lambda x, w, b: convt2d.forward(x, w, b, **kw), fullgraph=True,
                       backend="aot_eager", dynamic=True)
    for n, h, wd in [(1, 5, 7), (3, 4, 9), (2, 8, 3)]:
        x, w, b = CFG.scaled(N=n, H=h, W=wd).make(torch.float64, device)
        ref, _ = reference(x, w, b, kw)
        assert_close(cf(x, w, b), ref, torch.float64, device, f"dynamic {n}x{h}x{wd}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_export_module(device):
    torch.manual_seed(0)
    m = convt2d.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0),
                                output_padding=(1, 0), dilation=(1, 2), groups=2).to(device)
    x = torch.randn(2, 4, 5, 7, device=device)
    ep = torch.export.export(m, (x,))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert any("convt2d.forward" in t for t in targets), targets
    x2 = torch.randn(2, 4, 5, 7, device=device)
    with _tf32_off():
        got = ep.module()(x2)
        ref, _ = reference(x2, m.weight, m.bias, dict(stride=m.stride, padding=m.padding,
                                                      output_padding=m.output_padding,
                                                      groups=m.groups, dilation=m.dilation))
        assert_close(got, ref, torch.float32, device, "exported module")
