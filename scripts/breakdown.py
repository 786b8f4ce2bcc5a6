"""Per-kernel GPU time of convt2d and of torch for suite rows (torch.profiler, 10 calls each):
python scripts/breakdown.py [rows...]   (BD_DTYPES=bf16,fp32; BD_PASSES=fwd,bwd)
bwd = grads of x and w, as the bench times it."""
import os
import sys

import torch

import convt2d  # noqa: F401
from suite_rows import call_pair, kernel_times, suite_inputs

rows = sys.argv[1:]
dts = os.environ.get("BD_DTYPES", "bf16,fp32").split(",")
passes = os.environ.get("BD_PASSES", "fwd,bwd").split(",")
REP = 10


for cfg, dn, x, w, gy in suite_inputs(rows, dts):
    mask = [True, True, False]
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
        for ps in passes:
            ft, fo = call_pair(cfg, x, w, gy, None if ps == "fwd" else mask)
            for side, fn in (("torch", ft), ("ours", fo)):
                ks = kernel_times(fn, REP)
                tot = sum(v for _, v in ks)
                print(f"== {cfg.name} {dn} {ps} {side}: {tot:.3f} ms (sum of kernels)")
                for k, v in ks[:8]:
                    print(f"   {v:7.3f}  {k}")
