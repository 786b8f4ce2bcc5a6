"""Host-side cost per call (GPU): tiny tensors, so the GPU is idle and the wall time per call is
the CPU's work (dispatch, glue, launches). convt2d vs torch for the forward, the backward op
called directly, and forward + autograd.grad; bf16 and fp32, dcgan- and vae-like parameters.
python scripts/host_overhead.py"""
import time

import torch
import torch.nn.functional as F

import convt2d


def per_call(fn, n=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


for dt in (torch.bfloat16, torch.float32):
    for name, cin, cout, k, s, p, op in (("dcgan-like", 64, 32, 4, 2, 1, 0),
                                         ("vae-like", 64, 32, 3, 2, 1, 1)):
        x = torch.randn(2, cin, 8, 8, device="cuda", dtype=dt, requires_grad=True)
        w = torch.randn(cin, cout, k, k, device="cuda", dtype=dt, requires_grad=True)
        y = F.conv_transpose2d(x, w, None, s, p, op)
        go = torch.randn_like(y)
        args = ([s, s], [p, p], [op, op], 1, [1, 1])
        res = {}
        for side, f in (("convt2d", convt2d.forward), ("torch", F.conv_transpose2d)):
            def fwd():
                with torch.no_grad():
                    f(x, w, None, s, p, op, 1, 1)

            def fwdbwd():
                yy = f(x, w, None, s, p, op, 1, 1)
                torch.autograd.grad(yy, [x, w], go)
            res[side] = (per_call(fwd), per_call(fwdbwd))
        with torch.no_grad():
            bop = per_call(lambda: torch.ops.convt2d.backward(go, x, w, *args, [True, True, False]))
            bt = per_call(lambda: torch.ops.aten.convolution_backward(
                go, x, w, None, [s, s], [p, p], [1, 1], True, [op, op], 1, [True, True, False]))
        print(f"{str(dt):15} {name:10} us/call  fwd: convt2d {res['convt2d'][0]:6.1f} torch "
              f"{res['torch'][0]:6.1f} | bwd op: convt2d {bop:6.1f} torch {bt:6.1f} | "
              f"fwd+autograd: convt2d {res['convt2d'][1]:6.1f} torch {res['torch'][1]:6.1f}")
