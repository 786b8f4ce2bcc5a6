"""Backward split timing (GPU): grad_input only, grad_weight only, both; torch vs convt2d,
same process, triton do_bench median, fresh inputs per row.
Usage: python scripts/bwd_split.py [rows...]   (BS_DTYPES=fp32,bf16,fp16,ieee; BS_MASKS=gi,gw,both)"""
import os
import sys

import torch
from triton.testing import do_bench

import convt2d  # noqa: F401  (registers torch.ops.convt2d)
from suite_rows import call_pair, suite_inputs

rows = [a for a in sys.argv[1:] if not a.startswith("--")]
dts = os.environ.get("BS_DTYPES", "fp32,bf16,ieee").split(",")
masks = os.environ.get("BS_MASKS", "gi,gw,both").split(",")
torch.manual_seed(0)


def t(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


print(f"{'row':8} {'dtype':5} {'mask':5} {'torch ms':>9} {'ours ms':>9} {'speedup':>8} {'gw err':>8}")
for cfg, dn, x, w, gy in suite_inputs(rows, dts):
    stride, padding, output_padding, groups, dilation = cfg.args()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
        ref = torch.ops.aten.convolution_backward(
            gy.double(), x.double(), w.double(), None, stride, padding, dilation, True,
            output_padding, groups, [False, True, False])[1] if cfg.N * cfg.H * cfg.W < 1e6 else None
        for name, mask in (("gi", [True, False, False]), ("gw", [False, True, False]),
                           ("both", [True, True, False])):
            if name not in masks:
                continue
            ft, fo = call_pair(cfg, x, w, gy, mask)
            tt, to = t(ft), t(fo)
            err = "-"
            if name == "gw" and ref is not None:
                g = fo()[1].double()
                err = f"{((g - ref).norm() / ref.norm()).item():.1e}"
            print(f"{cfg.name:8} {dn:5} {name:5} {tt:9.3f} {to:9.3f} {tt / to:7.2f}x {err:>8}",
                  flush=True)
