"""Backward split timing (GPU): grad_input only, grad_weight only, both; torch vs convt2d,
same process, triton do_bench median, fresh inputs per row.
Usage: python scripts/bwd_split.py [rows...]   (BS_DTYPES=fp32,bf16,fp16,ieee; BS_MASKS=gi,gw,both)"""
import os
import sys

import torch
from triton.testing import do_bench

import convt2d  # noqa: F401  (registers torch.ops.convt2d)
from convt2d.bench import SUITE

rows = [a for a in sys.argv[1:] if not a.startswith("--")]
dts = os.environ.get("BS_DTYPES", "fp32,bf16,ieee").split(",")
masks = os.environ.get("BS_MASKS", "gi,gw,both").split(",")
DT = {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
torch.manual_seed(0)


def t(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


print(f"{'row':8} {'dtype':5} {'mask':5} {'torch ms':>9} {'ours ms':>9} {'speedup':>8} {'gw err':>8}")
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
            ref = torch.ops.aten.convolution_backward(
                gy.double(), x.double(), w.double(), None, stride, padding, dilation, True,
                output_padding, groups, [False, True, False])[1] if cfg.N * cfg.H * cfg.W < 1e6 else None
            for name, mask in (("gi", [True, False, False]), ("gw", [False, True, False]),
                               ("both", [True, True, False])):
                if name not in masks:
                    continue
                ft = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    gy, x, w, None, stride, padding, dilation, True, output_padding, groups, mask)
                fo = lambda: torch.ops.convt2d.backward(  # noqa: E731
                    gy, x, w, stride, padding, output_padding, groups, dilation, mask)
                tt, to = t(ft), t(fo)
                err = "-"
                if name == "gw" and ref is not None:
                    g = fo()[1].double()
                    err = f"{((g - ref).norm() / ref.norm()).item():.1e}"
                print(f"{cfg.name:8} {dn:5} {name:5} {tt:9.3f} {to:9.3f} {tt / to:7.2f}x {err:>8}",
                      flush=True)
        del x, w, y, gy
        torch.cuda.empty_cache()
