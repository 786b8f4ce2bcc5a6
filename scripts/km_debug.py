"""Debug run of the NCHW wgmma grad_weight (tc_wgrad_km.cu) on one small shape (GPU):
python scripts/km_debug.py ieee|tf32 [N Cin Cout H W kh kw sh dh dw ph pw]"""
import os
import sys

import torch

import convt2d  # noqa: F401

mode = sys.argv[1]
n, cin, cout, h, wd, kh, kw, sh, dh, dw, ph, pw = (
    int(v) for v in (sys.argv[2:14] if len(sys.argv) > 2 else (1, 64, 64, 4, 32, 1, 1, 1, 1, 1, 0, 0)))
if mode == "tf32":
    os.environ["CONVT2D_WGRAD_KM"] = "1"
torch.backends.cudnn.allow_tf32 = mode == "tf32"
torch.manual_seed(0)
x = torch.randn(n, cin, h, wd, device="cuda")
w = torch.randn(cin, cout, kh, kw, device="cuda")
ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1
wo = (wd - 1) - 2 * pw + dw * (kw - 1) + 1
gy = torch.randn(n, cout, ho, wo, device="cuda")
gw = torch.ops.convt2d.backward(gy, x, w, [sh, 1], [ph, pw], [0, 0], 1, [dh, dw],
                                [False, True, False])[1]
torch.cuda.synchronize()
ref = torch.ops.aten.convolution_backward(gy.double().cpu(), x.double().cpu(), w.double().cpu(),
                                          None, [sh, 1], [ph, pw], [dh, dw], True, [0, 0], 1,
                                          [False, True, False])[1]
err = (gw.double().cpu() - ref).norm() / ref.norm()
print(f"{mode} {tuple(x.shape)} k={kh}x{kw}: rel err {err:.2e}")
