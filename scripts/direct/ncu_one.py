"""One seedD forward through the direct kernel (for ncu): python ncu_one.py fp32|bf16"""
import os
import sys

os.environ["CONVT2D_KERNEL"] = "direct"
import torch
import convt2d

dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
x = torch.randn(16, 32, 128, 256, device="cuda", dtype=dt)
w = torch.randn(32, 16, 3, 5, device="cuda", dtype=dt)
convt2d.forward(x, w, None, (2, 3), (1, 2), 0, 4, (2, 1))
torch.cuda.synchronize()
