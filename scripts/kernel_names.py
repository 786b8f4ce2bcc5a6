"""Which CUDA kernels one suite row runs (torch.profiler): python scripts/kernel_names.py seedB bf16
(dtype fp32, ieee = fp32 with TF32 off, bf16, fp16); PROFILE_PASS=fwd | gi | gw | bwd as in
profile_rows.py."""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import convt2d  # noqa: F401
from convt2d.bench import SUITE

name, dt = sys.argv[1], {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16,
                         "fp16": torch.float16}[sys.argv[2]]
torch.backends.cudnn.allow_tf32 = sys.argv[2] != "ieee"
cfg = {c.name: c for c in SUITE}[name]
x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda", dtype=dt)
w = torch.randn(cfg.Cin, cfg.Cout // cfg.groups, *cfg.k, device="cuda", dtype=dt)
args = cfg.args()
mode = os.environ.get("PROFILE_PASS", "fwd")
if mode == "fwd":
    fn = lambda: convt2d.forward(x, w, None, *args)  # noqa: E731
else:
    gy = torch.randn_like(convt2d.forward(x, w, None, *args))
    mask = {"gi": [True, False, False], "gw": [False, True, False], "bwd": [True, True, False]}[mode]
    fn = lambda: torch.ops.convt2d.backward(gy, x, w, *args, mask)  # noqa: E731
fn()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    fn()
    torch.cuda.synchronize()
for e in prof.key_averages():
    if e.device_type.name == "CUDA" or "CUDA" in str(e.device_type):
        print(f"{e.key[:110]:110s} {e.device_time_total / 1e3:8.3f} ms")
