"""Run one suite row's forward a few times (for ncu): python scripts/profile_rows.py seedA bf16"""
import sys

import torch

import convt2d
from convt2d.bench import SUITE  # noqa: F401

name, dt = sys.argv[1], {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[2]]
cfg = {c.name: c for c in SUITE}[name]
x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda", dtype=dt)
w = torch.randn(cfg.Cin, cfg.Cout // cfg.groups, *cfg.k, device="cuda", dtype=dt)
for _ in range(2):
    convt2d.forward(x, w, None, *cfg.args())
torch.cuda.synchronize()
