"""compute-sanitizer target (GPU): the warp-specialised tc_ws kernel forced on, with its TMA
loader and with its cp.async loader, one forward with more tiles than SMs (4 phases x 36 row
tiles) and its grad_input, each checked against float64 on the CPU.
Usage: compute-sanitizer --tool racecheck|synccheck python scripts/sanitize_ws.py"""
import os

import torch

import convt2d

os.environ["CONVT2D_WS"] = "1"
os.environ["CONVT2D_HALO"] = "0"
torch.manual_seed(0)
F = torch.nn.functional
for tma in ("1", "0"):
    os.environ["CONVT2D_WS_TMA"] = tma
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(4, 64, 48, 48, device="cuda", dtype=dt, requires_grad=True)
        w = torch.randn(64, 192, 4, 4, device="cuda", dtype=dt) * 0.1
        b = torch.randn(192, device="cuda", dtype=dt)
        y = convt2d.forward(x, w, b, 2, 1, 0, 1, 1)
        gy = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, x, gy)
        xd, wd = x.detach().cpu().double().requires_grad_(True), w.cpu().double()
        ref = F.conv_transpose2d(xd, wd, b.cpu().double(), 2, 1)
        (gref,) = torch.autograd.grad(ref, xd, gy.cpu().double())
        for name, a, r in (("forward", y, ref), ("grad_input", gx, gref)):
            err = ((a.detach().cpu().double() - r).norm() / r.norm()).item()
            print(f"tma={tma} {dt} {name}: rel err {err:.2e}", "ok" if err < 2e-2 else "BAD")
