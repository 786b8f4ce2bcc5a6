"""Per-kernel GPU time of forward + torch.autograd.grad(out, [x, w], gy) through autograd, for
suite rows (torch.profiler, 10 calls): python scripts/fwdbwd_kernels.py [rows...]
(FK_DTYPES=fp32,bf16). Shows which kernels the autograd path runs, next to the bench's fwdbwd."""
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import convt2d
from suite_rows import suite_inputs

REP = 10


def kernels(fn):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REP):
            fn()
        torch.cuda.synchronize()
    agg = defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            agg[e.name[:90]] += e.device_time / 1e3 / REP
    return sorted(agg.items(), key=lambda kv: -kv[1])


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
            ks = kernels(fn)
            print(f"== {cfg.name} {dn} fwdbwd {side}: {sum(t for _, t in ks):.3f} ms (sum of kernels)")
            for name, t in ks[:8]:
                print(f"   {t:7.3f}  {name}")
