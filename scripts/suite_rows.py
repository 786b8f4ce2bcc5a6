"""Inputs of the suite rows for the GPU timing scripts (env_ab.py, breakdown.py, f16x3_err.py)."""
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import convt2d  # noqa: F401  (registers torch.ops.convt2d)
from convt2d.bench import SUITE

DT = {"fp32": torch.float32, "ieee": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def suite_inputs(rows, dtype_names, device="cuda", configs=SUITE):
    """For each suite row named in `rows` (all when empty) and each dtype name (fp32, ieee,
    bf16, fp16), yield (cfg, dtype name, x, w, gy): x ~ N(0, 1), w ~ 0.1 N(0, 1), gy ~ N(0, 1)
    shaped like convt2d's output."""
    for cfg in configs:
        if rows and cfg.name not in rows:
            continue
        stride, padding, output_padding, groups, dilation = cfg.args()
        for dn in dtype_names:
            dt = DT[dn]
            x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device=device).to(dt)
            w = (torch.randn(cfg.Cin, cfg.Cout // groups, *cfg.k, device=device) * 0.1).to(dt)
            y = torch.ops.convt2d.forward(x, w, None, stride, padding, output_padding, groups,
                                          dilation)
            gy = torch.randn_like(y)
            del y
            yield cfg, dn, x, w, gy
            del x, w, gy
            if device == "cuda":
                torch.cuda.empty_cache()


def call_pair(cfg, x, w, gy, mask=None):
    """(torch's call, convt2d's call) of one row: the forward when mask is None, else the
    backward for the [grad_input, grad_weight, grad_bias] mask."""
    stride, padding, output_padding, groups, dilation = cfg.args()
    if mask is None:
        return (lambda: torch.ops.aten.convolution(
                    x, w, None, stride, padding, dilation, True, output_padding, groups),
                lambda: torch.ops.convt2d.forward(
                    x, w, None, stride, padding, output_padding, groups, dilation))
    return (lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, stride, padding, dilation, True, output_padding, groups, mask),
            lambda: torch.ops.convt2d.backward(
                gy, x, w, stride, padding, output_padding, groups, dilation, mask))


def kernel_times(fn, rep=10):
    """[(kernel name[:90], ms per call)] of fn's CUDA kernels, slowest first (torch.profiler over
    rep calls after one warm-up call)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rep):
            fn()
        torch.cuda.synchronize()
    agg = defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            agg[e.name[:90]] += e.device_time / 1e3 / rep
    return sorted(agg.items(), key=lambda kv: -kv[1])
