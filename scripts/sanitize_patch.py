"""The patch GEMM (patch_gemm.cu) on small shapes for compute-sanitizer (memcheck / racecheck):
K and N tails, groups, 8- and 128-wide tiles, k=4 s=4, kw=1, 1x1; every dtype and math mode.
Prints the relative error vs float64 per case (no profiler: CUPTI cannot attach under the
sanitizer). Usage: compute-sanitizer --tool memcheck python scripts/sanitize_patch.py"""
import os

import torch
import torch.nn.functional as F

import convt2d

os.environ["CONVT2D_KERNEL"] = "patch"
torch.manual_seed(0)
CASES = [(2, 64, 32, 8, 16, 2, 2, 1), (3, 40, 24, 5, 24, 2, 2, 1), (2, 48, 40, 6, 40, 2, 2, 2),
         (1, 32, 16, 4, 200, 4, 4, 1), (2, 24, 20, 7, 8, 2, 1, 1), (2, 72, 136, 3, 16, 1, 1, 1),
         (1, 16, 64, 33, 8, 2, 2, 1), (2, 20, 12, 5, 24, 1, 8, 1),
         (1, 24, 8, 6, 16, 2, 16, 1)]
worst = 0.0
for dn, dt, tf32 in [("bf16", torch.bfloat16, True), ("fp16", torch.float16, True),
                     ("fp32", torch.float32, True), ("ieee", torch.float32, False)]:
    for (N, ci, co, H, W, kh, kw, g) in CASES:
        x = torch.randn(N, ci, H, W, device="cuda").to(dt)
        w = (torch.randn(ci, co // g, kh, kw, device="cuda") / (ci // g) ** 0.5).to(dt)
        b = torch.randn(co, device="cuda").to(dt)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
            out = convt2d.forward(x, w, b, stride=(kh, kw), groups=g)
        ref = F.conv_transpose2d(x.double().cpu(), w.double().cpu(), b.double().cpu(),
                                 stride=(kh, kw), groups=g)
        err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        print(f"{dn} N{N} {ci}->{co} {H}x{W} k{kh}x{kw} g{g}: rel err {err:.2e}")
torch.cuda.synchronize()
print("worst rel err", f"{worst:.2e}")
