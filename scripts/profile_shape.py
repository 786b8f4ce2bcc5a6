"""Run one forward shape a few times (for ncu / nsys): python scripts/profile_shape.py
N,Cin,Cout,k,H,W,stride,padding,output_padding [fp32|ieee|bf16|fp16] (x NCHW, no bias)."""
import sys

import torch

import convt2d  # noqa: F401  (registers torch.ops.convt2d)

n, cin, cout, k, h, w_, s, p, op = (int(v) for v in sys.argv[1].split(","))
dn = sys.argv[2] if len(sys.argv) > 2 else "fp32"
dt = {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16,
      "fp16": torch.float16}[dn]
torch.backends.cudnn.allow_tf32 = dn != "ieee"
x = torch.randn(n, cin, h, w_, device="cuda").to(dt)
w = (torch.randn(cin, cout, k, k, device="cuda") * 0.1).to(dt)
for _ in range(3):
    torch.ops.convt2d.forward(x, w, None, [s, s], [p, p], [op, op], 1, [1, 1])
torch.cuda.synchronize()
