"""Per-kernel GPU time of forward + torch.autograd.grad(out, [x, w], gy) through autograd, for
suite rows (torch.profiler, 10 calls): python scripts/fwdbwd_kernels.py [rows...]
(FK_DTYPES=fp32,bf16). Shows which kernels the autograd path runs, next to the bench's fwdbwd."""
import os
import sys

import torch

import convt2d
from suite_rows import kernel_times, suite_inputs

REP = 10

for cfg, dn, x, w, gy in suite_inputs(sys.argv[1:], os.environ.get("FK_DTYPES", "fp32,bf16").split(",")):
    stride, padding, output_padding, groups, dilation = cfg.args()
    x.requires_grad_(True)
    w.requires_grad_(True)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
        for side in ("torch", "ours"):
            f = (torch.nn.functional.conv_transpose2d if side == "torch" else convt2d.forward)

            def fn():
                out = f(x, w, None, stride, padding, output_padding, groups, dilation)
                return torch.autograd.grad(out, [x, w], gy)
            ks = kernel_times(fn, REP)
            print(f"== {cfg.name} {dn} fwdbwd {side}: {sum(t for _, t in ks):.3f} ms (sum of kernels)")
            for name, t in ks[:8]:
                print(f"   {t:7.3f}  {name}")
