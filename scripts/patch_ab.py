"""Forward timing of kernel == stride shapes outside the suite (GPU): torch vs convt2d's
default (the patch GEMM where it applies) vs CONVT2D_KERNEL=tc (the per-phase implicit GEMM),
same process, triton do_bench median, input sets rotated past L2.
Usage: python scripts/patch_ab.py [dtypes, default bf16,fp32]"""
import os
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import convt2d

dts = (sys.argv[1] if len(sys.argv) > 1 else "bf16,fp32").split(",")
# (N, Cin, Cout, H, W, k): U-Net / VAE decoder upsampling and a few odd sizes
SHAPES = [(16, 256, 128, 64, 64, 2), (8, 512, 256, 32, 32, 2), (4, 128, 64, 128, 128, 2),
          (1, 64, 32, 256, 256, 2), (2, 320, 320, 64, 64, 2), (8, 192, 96, 48, 48, 2),
          (1, 640, 320, 40, 72, 2), (32, 96, 48, 24, 24, 2), (4, 64, 32, 64, 64, 4),
          (16, 256, 128, 30, 30, 2)]
torch.manual_seed(0)
print(f"{'shape':32} {'dtype':5} {'torch':>7} {'tc':>7} {'default':>7}  speedup(default)  maxdiff")
for dn in dts:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dn]
    for (N, ci, co, H, W, k) in SHAPES:
        x0 = torch.randn(N, ci, H, W, device="cuda", dtype=dt)
        w0 = torch.randn(ci, co, k, k, device="cuda", dtype=dt) / (ci ** 0.5)
        b0 = torch.randn(co, device="cuda", dtype=dt)
        per = (x0.numel() + N * co * H * W * k * k) * x0.element_size()
        nset = max(1, min(8, (120 << 20) // per + 1))
        sets = [(torch.randn_like(x0), w0, b0) for _ in range(nset)]
        it = [0]

        def nxt():
            it[0] = (it[0] + 1) % nset
            return sets[it[0]]

        def tor():
            x, w, b = nxt()
            return F.conv_transpose2d(x, w, b, stride=k)

        def ours():
            x, w, b = nxt()
            return convt2d.forward(x, w, b, stride=k)

        res = {}
        for name, env in [("torch", None), ("tc", "tc"), ("default", "")]:
            if env is None:
                os.environ.pop("CONVT2D_KERNEL", None)
                res[name] = do_bench(tor, warmup=25, rep=100, return_mode="median")
            else:
                os.environ["CONVT2D_KERNEL"] = env
                res[name] = do_bench(ours, warmup=25, rep=100, return_mode="median")
        os.environ.pop("CONVT2D_KERNEL", None)
        x, w, b = sets[0]
        d = (convt2d.forward(x, w, b, stride=k).float() - F.conv_transpose2d(x, w, b, stride=k).float()).abs().max().item()
        shp = f"N{N} {ci}->{co} {H}x{W} k{k}"
        print(f"{shp:32} {dn:5} {res['torch']:7.3f} {res['tc']:7.3f} {res['default']:7.3f}"
              f"  {res['torch'] / res['default']:5.2f}x (tc {res['torch'] / res['tc']:4.2f}x)  {d:.1e}")
