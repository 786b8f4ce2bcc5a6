"""A/B of a kernel-choice environment variable, CONVT2D_ALGO (GPU): forward and grad_input
times for each value, torch alongside, same process (the planner reads the variable on every
call), triton do_bench median. Usage: python scripts/env_ab.py VAR 'v1;v2;...' [rows...]
The values are separated by ';' (CONVT2D_ALGO values hold commas; quote the list in a shell);
an empty value is the variable set to "" (for CONVT2D_ALGO: the planner's heuristics). E.g.
  python scripts/env_ab.py CONVT2D_ALGO 'fwd:implicit_gemm_wgmma_ws;fwd:implicit_gemm_halo'
  python scripts/env_ab.py CONVT2D_ALGO ';dgrad:implicit_gemm_mma,bwd:strided' seedA
(EA_DTYPES=fp32,bf16,fp16,ieee; EA_PASSES=fwd,gi,gw,bwd: bwd = grads of x and w)"""
import os
import sys

import torch
from triton.testing import do_bench

import convt2d  # noqa: F401  (registers torch.ops.convt2d)
from convt2d.bench import SUITE, Config
from suite_rows import call_pair, suite_inputs

var, vals = sys.argv[1], sys.argv[2].split(";")
rows = sys.argv[3:]
dts = os.environ.get("EA_DTYPES", "fp32,bf16").split(",")
passes = os.environ.get("EA_PASSES", "fwd,gi").split(",")
torch.manual_seed(0)


def t(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


for i, v in enumerate(vals):  # the values are long: numbered columns
    print(f"[{i}] {var}={v}")
print(f"{'row':8} {'dtype':5} {'pass':4} {'torch ms':>9} " +
      " ".join(f"{f'[{i}]':>16}" for i in range(len(vals))))
# EA_EXTRA="name,N,Cin,Cout,k,H,W,stride,padding,output_padding;...": rows outside the suite
# (named on the command line like suite rows, or run with them when no rows are named).
extra = []
for spec in filter(None, os.environ.get("EA_EXTRA", "").split(";")):
    f = spec.split(",")
    n, cin, cout, k, h, wd, s_, p_, op = (int(v) for v in f[1:10])
    extra.append(Config(f[0], n, cin, cout, k, (h, wd), stride=s_, padding=p_,
                        output_padding=op))
    if rows:
        rows.append(f[0])
for cfg, dn, x, w, gy in suite_inputs(rows, dts, configs=list(SUITE) + extra):
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=dn != "ieee"):
        for ps in passes:
            mask = {"fwd": None, "gi": [True, False, False], "gw": [False, True, False],
                    "bwd": [True, True, False]}[ps]
            ft, fo = call_pair(cfg, x, w, gy, mask)
            pick = (lambda o: o) if mask is None else (lambda o: o[0] if mask[0] else o[1])
            res = []
            outs = []
            for v in vals:
                os.environ[var] = v
                res.append(t(fo))
                outs.append(fo())
            os.environ.pop(var, None)
            tt = t(ft)
            o0 = pick(outs[0])
            diffs = [(pick(o).float() - o0.float()).abs().max().item()
                     for o in outs[1:]]
            print(f"{cfg.name:8} {dn:5} {ps:4} {tt:9.3f} " +
                  " ".join(f"{r:8.3f}({tt / r:4.2f}x)" for r in res) +
                  "  maxdiff " + " ".join(f"{d:.1e}" for d in diffs), flush=True)
