"""A/B timing of kernel choices on the suite (GPU): torch vs convt2d with each CONVT2D_ALGO
value of AB_ALGOS, forward (and backward, at the default choices, with --bwd).
AB_ALGOS: CONVT2D_ALGO values separated by ';' (the values themselves hold commas), an empty
value or "default" for the planner's heuristics; default ";fwd:implicit_gemm;fwd:direct"
(e.g. also fwd:implicit_gemm_simt, the old CUDA-core "v1" forward, or fwd:patch_gemm).
AB_DTYPES=fp32,bf16,ieee. Sanity error vs torch's fp32 IEEE result on the same GPU
(correctness proper is scripts/gpu_check.py and the tests).
Usage: AB_ALGOS='default;fwd:implicit_gemm' python scripts/ab.py [--bwd] [rows...]"""
import os
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import convt2d
from convt2d.bench import SUITE

rows = [a for a in sys.argv[1:] if not a.startswith("--")]
do_bwd = "--bwd" in sys.argv
algos = ["" if a.strip() == "default" else a.strip()
         for a in os.environ.get("AB_ALGOS", ";fwd:implicit_gemm;fwd:direct").split(";")]
dts = os.environ.get("AB_DTYPES", "fp32,bf16,ieee").split(",")
torch.manual_seed(0)


def t(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def set_algo(a):
    """CONVT2D_ALGO=a for the next calls (the planner reads it on every call); "" unsets it."""
    if a:
        os.environ["CONVT2D_ALGO"] = a
    else:
        os.environ.pop("CONVT2D_ALGO", None)


for cfg in SUITE:
    if rows and cfg.name not in rows:
        continue
    stride, padding, output_padding, groups, dilation = cfg.args()
    kh, kw = cfg.k
    for dn in dts:
        dt = torch.bfloat16 if dn == "bf16" else torch.float32
        tf32 = dn != "ieee"
        x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda").to(dt)
        w = (torch.randn(cfg.Cin, cfg.Cout // cfg.groups, kh, kw, device="cuda") * 0.1).to(dt)
        b = torch.randn(cfg.Cout, device="cuda").to(dt) if cfg.bias else None
        args = (stride, padding, output_padding, groups, dilation)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            ref = F.conv_transpose2d(x.float(), w.float(), None if b is None else b.float(), *args)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
            tt = t(lambda: F.conv_transpose2d(x, w, b, *args))
            line = f"{cfg.name:6s} {dn:5s} fwd torch {tt:7.3f} ms |"
            for a in algos:
                set_algo(a)
                k = a or "default"
                try:
                    out = convt2d.forward(x, w, b, *args)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    tk = t(lambda: convt2d.forward(x, w, b, *args))
                    line += f" {k} {tk:7.3f} ({tt / tk:5.2f}x, err {err:.1e}) |"
                except Exception as e:  # noqa: BLE001
                    line += f" {k} ERR {str(e)[:80]} |"
            print(line, flush=True)
            if do_bwd:
                go = torch.randn_like(ref).to(dt)
                tb = t(lambda: torch.ops.aten.convolution_backward(
                    go, x, w, None, stride, padding, dilation, True, output_padding, groups,
                    [True, True, False]))
                set_algo("")
                ob = t(lambda: torch.ops.convt2d.backward(go, x, w, *args, [True, True, False]))
                oi = t(lambda: torch.ops.convt2d.backward(go, x, w, *args, [True, False, False]))
                print(f"{cfg.name:6s} {dn:5s} bwd torch {tb:7.3f} ms | ours {ob:7.3f} "
                      f"({tb / ob:5.2f}x) | ours grad_input only {oi:7.3f}", flush=True)
        set_algo("")
        del x, w, b, ref
        torch.cuda.empty_cache()
