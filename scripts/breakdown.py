"""Per-kernel GPU time of convt2d and of torch for suite rows (torch.profiler, 10 calls each):
python scripts/breakdown.py [rows...]   (BD_DTYPES=bf16,fp32; BD_PASSES=fwd,bwd)
bwd = grads of x and w, as the bench times it."""
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import convt2d  # noqa: F401
from convt2d.bench import SUITE

rows = sys.argv[1:]
DT = {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
dts = os.environ.get("BD_DTYPES", "bf16,fp32").split(",")
passes = os.environ.get("BD_PASSES", "fwd,bwd").split(",")
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
            agg[e.name[:90]] += e.device_time / 1e3 / REP  # ms per call
    return sorted(agg.items(), key=lambda kv: -kv[1])


for cfg in SUITE:
    if rows and cfg.name not in rows:
        continue
    stride, padding, output_padding, groups, dilation = cfg.args()
    for dn in dts:
        dt = DT[dn]
        x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda").to(dt)
        w = (torch.randn(cfg.Cin, cfg.Cout // groups, *cfg.k, device="cuda") * 0.1).to(dt)
        y = torch.ops.convt2d.forward(x, w, None, stride, padding, output_padding, groups, dilation)
        gy = torch.randn_like(y)
        mask = [True, True, False]
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
            for ps in passes:
                if ps == "fwd":
                    ft = lambda: torch.ops.aten.convolution(  # noqa: E731
                        x, w, None, stride, padding, dilation, True, output_padding, groups)
                    fo = lambda: torch.ops.convt2d.forward(  # noqa: E731
                        x, w, None, stride, padding, output_padding, groups, dilation)
                else:
                    ft = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                        gy, x, w, None, stride, padding, dilation, True, output_padding, groups,
                        mask)
                    fo = lambda: torch.ops.convt2d.backward(  # noqa: E731
                        gy, x, w, stride, padding, output_padding, groups, dilation, mask)
                for side, fn in (("torch", ft), ("ours", fo)):
                    ks = kernels(fn)
                    tot = sum(v for _, v in ks)
                    print(f"== {cfg.name} {dn} {ps} {side}: {tot:.3f} ms (sum of kernels)")
                    for k, v in ks[:8]:
                        print(f"   {v:7.3f}  {k}")
        del x, w, y, gy
        torch.cuda.empty_cache()
