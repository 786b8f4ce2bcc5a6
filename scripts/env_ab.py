"""A/B of a kernel-choice environment variable (GPU): forward and grad_input times for each
value, torch alongside, same process (the launchers read the variable on every call), triton
do_bench median. Usage: python scripts/env_ab.py VAR v1,v2,... [rows...]
(EA_DTYPES=fp32,bf16,fp16,ieee; EA_PASSES=fwd,gi)"""
import os
import sys

import torch
from triton.testing import do_bench

import convt2d  # noqa: F401  (registers torch.ops.convt2d)
from convt2d.bench import SUITE

var, vals = sys.argv[1], sys.argv[2].split(",")
rows = sys.argv[3:]
dts = os.environ.get("EA_DTYPES", "fp32,bf16").split(",")
passes = os.environ.get("EA_PASSES", "fwd,gi").split(",")
DT = {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
torch.manual_seed(0)


def t(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


print(f"{'row':8} {'dtype':5} {'pass':4} {'torch ms':>9} " + " ".join(f"{var}={v:>4}" for v in vals))
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
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
            for ps in passes:
                if ps == "fwd":
                    ft = lambda: torch.ops.aten.convolution(  # noqa: E731
                        x, w, None, stride, padding, dilation, True, output_padding, groups)
                    fo = lambda: torch.ops.convt2d.forward(  # noqa: E731
                        x, w, None, stride, padding, output_padding, groups, dilation)
                else:
                    mask = [True, False, False]
                    ft = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                        gy, x, w, None, stride, padding, dilation, True, output_padding, groups, mask)
                    fo = lambda: torch.ops.convt2d.backward(  # noqa: E731
                        gy, x, w, stride, padding, output_padding, groups, dilation, mask)
                res = []
                outs = []
                for v in vals:
                    os.environ[var] = v
                    res.append(t(fo))
                    outs.append(fo())
                os.environ.pop(var, None)
                tt = t(ft)
                o0 = outs[0] if ps == "fwd" else outs[0][0]
                diffs = [((o if ps == "fwd" else o[0]).float() - o0.float()).abs().max().item()
                         for o in outs[1:]]
                print(f"{cfg.name:8} {dn:5} {ps:4} {tt:9.3f} " +
                      " ".join(f"{r:8.3f}({tt / r:4.2f}x)" for r in res) +
                      "  maxdiff " + " ".join(f"{d:.1e}" for d in diffs), flush=True)
        del x, w, y, gy
        torch.cuda.empty_cache()
