"""compute-sanitizer target (GPU): the two Hopper kernels forced on (CONVT2D_ALGO), each with
its TMA loader and with its cp.async loader (loader=cpasync), checked against float64 on the
CPU:
- the warp-specialised tc_ws kernel: one forward with more tiles than SMs (4 phases x 36 row
  tiles) and its grad_input;
- the halo kernel: a stride-1 3x3 forward (three tap columns per phase) and its grad_input,
  into 96 and 64 columns (256- and 512-row tiles); and, in fp32 with TF32 off, its 3xFP16
  (block per tile and persistent; 96 columns: 3xFP16 needs more than 64) and 3xTF32 variants.
Usage: compute-sanitizer --tool racecheck|synccheck python scripts/sanitize_ws.py"""
import os

import torch

import convt2d

torch.manual_seed(0)
F = torch.nn.functional
# kernel, CONVT2D_ALGO (forward and grad_input), (x shape, w shape, stride, padding)
CASES = (
    ("ws", "fwd:implicit_gemm_wgmma_ws,dgrad:implicit_gemm_wgmma_ws",
     ((4, 64, 48, 48), (64, 192, 4, 4), 2, 1)),
    ("halo", "fwd:implicit_gemm_halo,dgrad:implicit_gemm_halo",
     ((2, 64, 40, 40), (64, 96, 3, 3), 1, 1)),
    ("halo", "fwd:implicit_gemm_halo,dgrad:implicit_gemm_halo",  # 64 columns: 512-row tiles
     ((2, 64, 40, 40), (64, 64, 3, 3), 1, 1)),
)
# fp32 with TF32 off (the halo kernel's split variants): the option each run adds
IEEE = ("", "f16x3_persist=on", "f16x3=off")
RUNS = [(dt, False, "") for dt in (torch.bfloat16, torch.float32)]
for kernel, algo, (xs, ws, s, p) in CASES:
    for tma in ("1", "0"):
        loader = "" if tma == "1" else ",loader=cpasync"
        runs = RUNS + ([(torch.float32, True, o) for o in IEEE] if kernel == "halo" else [])
        for dt, ieee, opt in runs:
            os.environ["CONVT2D_ALGO"] = algo + loader + ("," + opt if opt else "")
            torch.backends.cudnn.allow_tf32 = not ieee
            x = torch.randn(*xs, device="cuda", dtype=dt, requires_grad=True)
            w = torch.randn(*ws, device="cuda", dtype=dt) * 0.1
            b = torch.randn(ws[1], device="cuda", dtype=dt)
            y = convt2d.forward(x, w, b, s, p, 0, 1, 1)
            gy = torch.randn_like(y)
            (gx,) = torch.autograd.grad(y, x, gy)
            xd, wd = x.detach().cpu().double().requires_grad_(True), w.cpu().double()
            ref = F.conv_transpose2d(xd, wd, b.cpu().double(), s, p)
            (gref,) = torch.autograd.grad(ref, xd, gy.cpu().double())
            for name, a, r in (("forward", y, ref), ("grad_input", gx, gref)):
                err = ((a.detach().cpu().double() - r).norm() / r.norm()).item()
                tol = 1e-5 if ieee else 2e-2
                print(f"{kernel} tma={tma} {dt}{' ieee ' + opt if ieee else ''} {name}: "
                      f"rel err {err:.2e}", "ok" if err < tol else "BAD")
