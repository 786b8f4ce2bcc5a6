"""3xFP16 A/B (GPU): forward time and error of fp32 with TF32 off for each value of an
environment variable (CONVT2D_ALGO), torch alongside. Error vs float64 on the GPU from the
same inputs: normwise ||out - ref|| / ||ref|| and elementwise max |out - ref| / (|x| * |w|
summed), the bound fp32 error analysis uses. Values separated by ';' (CONVT2D_ALGO values may
hold commas; an empty value: the heuristics). Usage:
  python scripts/f16x3_err.py CONVT2D_ALGO 'f16x3=on;f16x3=off' [rows...]"""
import os
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import convt2d  # noqa: F401
from suite_rows import suite_inputs

var, vals = sys.argv[1], sys.argv[2].split(";")
rows = sys.argv[3:] or ["seedA", "unet", "dcgan", "vae"]
torch.manual_seed(0)
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
print(f"{'row':6} {'impl':>20} {'ms':>8} {'norm err':>9} {'elem err':>9}")
for cfg, dn, x, w, _ in suite_inputs(rows, ["ieee"]):
    st, pd, op, g, dl = cfg.args()
    ref = F.conv_transpose2d(x.double(), w.double(), None, st, pd, op, g, dl)
    bound = F.conv_transpose2d(x.double().abs(), w.double().abs(), None, st, pd, op, g, dl)
    bound.clamp_(min=1e-300)

    def report(name, fn):
        out = fn()
        d = out.double() - ref
        ne = (d.norm() / ref.norm()).item()
        ee = (d.abs() / bound).max().item()
        del out, d
        ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
        print(f"{cfg.name:6} {name:>20} {ms:8.3f} {ne:9.2e} {ee:9.2e}", flush=True)

    report("torch", lambda: F.conv_transpose2d(x, w, None, st, pd, op, g, dl))
    for v in vals:
        os.environ[var] = v
        report(v or "default", lambda: torch.ops.convt2d.forward(x, w, None, st, pd, op, g, dl))
    os.environ.pop(var, None)
    del ref, bound
    torch.cuda.empty_cache()
