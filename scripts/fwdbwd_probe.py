"""Where the time of forward + autograd backward goes (GPU): per-kernel times and CUDA-event
wall time per step for suite rows, convt2d vs torch.  python scripts/fwdbwd_probe.py dcgan vae
(FB_DTYPES=bf16,fp16)"""
import os
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import convt2d
from convt2d.bench import SUITE

rows = sys.argv[1:] or ["dcgan"]
dts = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
for cfg in SUITE:
    if cfg.name not in rows:
        continue
    stride, padding, output_padding, groups, dilation = cfg.args()
    for dn in os.environ.get("FB_DTYPES", "bf16,fp16").split(","):
        dt = dts[dn]
        x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda", dtype=dt, requires_grad=True)
        w = (torch.randn(cfg.Cin, cfg.Cout // groups, *cfg.k, device="cuda") * 0.05).to(dt)
        w.requires_grad_(True)
        for name, f in (("convt2d", convt2d.forward), ("torch", F.conv_transpose2d)):
            def step():
                y = f(x, w, None, stride, padding, output_padding, groups, dilation)
                return torch.autograd.grad(y, [x, w], torch.ones_like(y))
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(20):
                step()
            e.record()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
            agg = defaultdict(float)
            for ev in prof.events():
                if ev.device_type.name == "CUDA":
                    agg[ev.name[:80]] += ev.device_time / 1e3 / 10
            print(f"== {cfg.name} {dn} {name}: {s.elapsed_time(e) / 20:.3f} ms/step wall, "
                  f"{sum(agg.values()):.3f} ms kernels")
            for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:8]:
                print(f"   {v:7.3f}  {k}")
