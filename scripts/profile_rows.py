"""Run one suite row a few times (for ncu): python scripts/profile_rows.py seedA bf16|fp16|fp32|ieee
PROFILE_PASS=fwd (default) | gi | gw | bwd picks the forward or the backward gradients;
PROFILE_SIDE=torch runs torch's forward instead."""
import os
import sys

import torch

import convt2d
from convt2d.bench import SUITE  # noqa: F401

name, dt = sys.argv[1], {"fp32": torch.float32, "bf16": torch.bfloat16,
                         "fp16": torch.float16, "ieee": torch.float32}[sys.argv[2]]
torch.backends.cudnn.allow_tf32 = sys.argv[2] != "ieee"  # ieee: fp32 with TF32 off
cfg = {c.name: c for c in SUITE}[name]
x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda", dtype=dt)
w = torch.randn(cfg.Cin, cfg.Cout // cfg.groups, *cfg.k, device="cuda", dtype=dt)
mode = os.environ.get("PROFILE_PASS", "fwd")
if os.environ.get("PROFILE_SIDE") == "torch":  # cuDNN's kernels for the same call
    stride, padding, output_padding, groups, dilation = cfg.args()
    for _ in range(2):
        torch.nn.functional.conv_transpose2d(x, w, None, stride, padding, output_padding, groups,
                                             dilation)
elif mode == "fwd":
    for _ in range(2):
        convt2d.forward(x, w, None, *cfg.args())
else:
    stride, padding, output_padding, groups, dilation = cfg.args()
    gy = torch.randn_like(convt2d.forward(x, w, None, *cfg.args()))
    mask = {"gi": [True, False, False], "gw": [False, True, False],
            "bwd": [True, True, False]}[mode]
    for _ in range(2):
        torch.ops.convt2d.backward(gy, x, w, stride, padding, output_padding, groups, dilation,
                                   mask)
torch.cuda.synchronize()
