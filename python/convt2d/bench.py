"""Benchmark convt2d against torch.nn.functional.conv_transpose2d.

    python -m convt2d.bench                       # CUDA: full suite, fp32 + bf16, fwd, bwd,
                                                  # fwd + bwd with cudnn.benchmark on
    python -m convt2d.bench --cpu --quick         # CPU smoke run on scaled-down shapes
    python -m convt2d.bench --dtypes fp32,bf16,fp16,fp32-ieee --passes fwd,bwd,fwdbwd
    python -m convt2d.bench --impl torch-as-both  # times torch against itself (harness test)
    python -m convt2d.bench --sweep 200 --seed 7   # 200 random realistic layers: distribution
    python -m convt2d.bench --models               # layers of published models, sources named
    python -m convt2d.bench --layer 8,1024,512,4,8,8,2,1   # one layer you type in
    python -m convt2d.bench --e2e-only             # whole training steps (DCGAN, pix2pix)
    python -m convt2d.bench --host --configs unet  # per-call (host) time of tiny layers

Both implementations are timed in the same process, interleaved per row (torch, then
convt2d), on the same input tensors. Writes bench_results.json / .md / .png into --outdir
and prints the markdown table at the end.

Passes:
  fwd     forward only.
  bwd     grad_input and grad_weight only (no bias grad), by calling the backward ops directly:
          torch.ops.aten.convolution_backward(..., transposed=True, ..., [True, True, False]) for
          torch and torch.ops.convt2d.backward(..., [True, True, False]) for convt2d. Nothing but
          the backward call is timed.
  fwdbwd  forward + torch.autograd.grad(out, [x, w], grad_out) through autograd.
  fwdbwd-tuned  fwdbwd with torch.backends.cudnn.benchmark = True for both sides (each tunes
          on its first, untimed call), plus convt2d's time with it off ("off ms"): the
          "on / off" column shows what tuning gains or costs convt2d per call (on the suite it
          must stay <= 1.05). In the default passes.

dtypes:
  fp32       torch defaults: cudnn.allow_tf32 = True (cuBLAS matmul flag left at its default).
  fp32-ieee  cudnn.allow_tf32 = False and cuda.matmul.allow_tf32 = False, for both sides.
  bf16, fp16 operands (and bias, grads) in that dtype.

Metrics:
  err      ||out - ref|| / ||ref||, ref = the same computation in float64 from the same
           (rounded) inputs, via F.conv_transpose2d / autograd (on the GPU when running there).
           For bwd/fwdbwd the max over the outputs compared (output, grad_input, grad_weight).
  FLOPs    forward = 2 * N * Cin * (Cout/groups) * H * W * kh * kw: every input pixel times every
           tap, including taps that land in the cropped padding (the standard count).
           bwd (grad_input + grad_weight) = 2x forward; fwdbwd = 3x forward.
  bytes    fwd: (input + weight + output [+ bias]) elements * element size.
           bwd: read grad_output, input, weight; write grad_input, grad_weight.
           fwdbwd: fwd + bwd.
  floor    max(FLOPs / peak_flops(dtype), bytes / bandwidth); "% floor" = floor / convt2d time.
           Peaks: matmul of 8192^3 (bf16, fp16, fp32 with TF32 for "fp32", fp32 IEEE for
           "fp32-ieee") and a 1 GiB device-to-device copy (bytes read + written), measured once at
           start, unless given by flags. On CUDA, fp32-ieee uses max(fp32 peak, tf32 peak / 3,
           fp16 peak / 3): fp32-accurate results at the tensor cores' 3xTF32 or 3xFP16 rate (what
           convt2d runs) can beat the FMA peak, so that is the floor of the methods, not of any
           algorithm.
"""
import argparse
import contextlib
import datetime
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Suite
# ---------------------------------------------------------------------------------------------


def _pair(v) -> Tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(e) for e in v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


class Config:
    def __init__(self, name, N, Cin, Cout, k, hw, stride=1, padding=0, output_padding=0,
                 dilation=1, groups=1, bias=False, channels_last=False, source=""):
        self.name = name
        self.N, self.Cin, self.Cout = N, Cin, Cout
        self.k = _pair(k)
        self.H, self.W = _pair(hw)
        self.stride, self.padding = _pair(stride), _pair(padding)
        self.output_padding, self.dilation = _pair(output_padding), _pair(dilation)
        self.groups, self.bias = groups, bias
        self.channels_last = channels_last  # x (and grad_output) channels-last
        self.source = source  # where the layer comes from (the model zoo)

    def scaled(self, N, H, W) -> "Config":
        c = Config(self.name, N, self.Cin, self.Cout, self.k, (H, W), self.stride, self.padding,
                   self.output_padding, self.dilation, self.groups, self.bias,
                   self.channels_last, self.source)
        return c

    def valid(self) -> bool:
        ho, wo = self.out_hw
        return (min(self.N, self.Cin, self.Cout, self.H, self.W, self.groups) > 0 and ho > 0
                and wo > 0 and self.Cin % self.groups == 0 and self.Cout % self.groups == 0
                and all(op < max(st, d) for op, st, d in
                        zip(self.output_padding, self.stride, self.dilation))
                and min(self.padding) >= 0 and min(self.stride) > 0 and min(self.dilation) > 0)

    @property
    def out_hw(self) -> Tuple[int, int]:
        (kh, kw), (sh, sw), (ph, pw) = self.k, self.stride, self.padding
        (oph, opw), (dh, dw) = self.output_padding, self.dilation
        ho = (self.H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
        wo = (self.W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
        return ho, wo

    def numels(self) -> Dict[str, int]:
        ho, wo = self.out_hw
        kh, kw = self.k
        return {
            "x": self.N * self.Cin * self.H * self.W,
            "w": self.Cin * (self.Cout // self.groups) * kh * kw,
            "out": self.N * self.Cout * ho * wo,
            "b": self.Cout if self.bias else 0,
        }

    def fwd_flops(self) -> int:
        kh, kw = self.k
        return 2 * self.N * self.Cin * (self.Cout // self.groups) * self.H * self.W * kh * kw

    def args(self):
        """(stride, padding, output_padding, groups, dilation) as lists, convt2d's arg order."""
        return (list(self.stride), list(self.padding), list(self.output_padding), self.groups,
                list(self.dilation))

    def describe(self) -> str:
        def p(v):
            return str(v[0]) if v[0] == v[1] else f"({v[0]},{v[1]})"

        ho, wo = self.out_hw
        return (f"N={self.N} {self.Cin}->{self.Cout} k={p(self.k)} {self.H}x{self.W}->{ho}x{wo} "
                f"s={p(self.stride)} p={p(self.padding)} op={p(self.output_padding)} "
                f"d={p(self.dilation)} g={self.groups} bias={'yes' if self.bias else 'no'}"
                + (" channels_last" if self.channels_last else ""))

    def layer_string(self) -> str:
        """The --layer argument that reproduces this config."""
        return ",".join(str(v) for v in (
            self.N, self.Cin, self.Cout, self.k[0], self.k[1], self.H, self.W, self.stride[0],
            self.stride[1], self.padding[0], self.padding[1], self.output_padding[0],
            self.output_padding[1], self.dilation[0], self.dilation[1], self.groups,
            int(self.bias), int(self.channels_last)))


SUITE: List[Config] = [
    Config("seedA", 64, 64, 128, (3, 5), (128, 256)),
    Config("seedB", 8, 64, 64, (3, 7), (512, 512)),
    Config("seedC", 16, 32, 64, 3, (64, 128), stride=5, padding=1, dilation=2),
    Config("seedD", 16, 32, 64, (3, 5), (128, 256), stride=(2, 3), padding=(1, 2),
           dilation=(2, 1), groups=4),
    Config("unet", 16, 256, 128, 2, (64, 64), stride=2, bias=True),
    Config("dcgan", 128, 256, 128, 4, (16, 16), stride=2, padding=1),
    Config("vae", 1, 512, 256, 3, (128, 128), stride=2, padding=1, output_padding=1),
]

# Layers of published models (--models): (name, source, Config args). Batch sizes are the
# papers' / reference implementations' training batches.
MODELS: List[Config] = [
    # DCGAN generator (Radford et al. 2016; pytorch/examples dcgan), nz 100, ngf 64, batch 128
    Config("dcgan-g1", 128, 100, 512, 4, 1, source="DCGAN G, 1x1 -> 4x4"),
    Config("dcgan-g2", 128, 512, 256, 4, 4, stride=2, padding=1, source="DCGAN G, 4 -> 8"),
    Config("dcgan-g3", 128, 256, 128, 4, 8, stride=2, padding=1, source="DCGAN G, 8 -> 16"),
    Config("dcgan-g4", 128, 128, 64, 4, 16, stride=2, padding=1, source="DCGAN G, 16 -> 32"),
    Config("dcgan-g5", 128, 64, 3, 4, 32, stride=2, padding=1, source="DCGAN G, RGB 32 -> 64"),
    # pix2pix U-Net-256 decoder (Isola et al. 2017; junyanz/pytorch-CycleGAN-and-pix2pix), batch 8
    Config("p2p-up1", 8, 512, 512, 4, 1, stride=2, padding=1, source="pix2pix U-Net, 1 -> 2"),
    Config("p2p-up2", 8, 1024, 512, 4, 2, stride=2, padding=1, source="pix2pix U-Net, 2 -> 4"),
    Config("p2p-up4", 8, 1024, 512, 4, 8, stride=2, padding=1, source="pix2pix U-Net, 8 -> 16"),
    Config("p2p-up5", 8, 1024, 256, 4, 16, stride=2, padding=1, source="pix2pix U-Net, 16 -> 32"),
    Config("p2p-up6", 8, 512, 128, 4, 32, stride=2, padding=1, source="pix2pix U-Net, 32 -> 64"),
    Config("p2p-up7", 8, 256, 64, 4, 64, stride=2, padding=1, source="pix2pix U-Net, 64 -> 128"),
    Config("p2p-up8", 8, 128, 3, 4, 128, stride=2, padding=1, bias=True,
           source="pix2pix U-Net, RGB 128 -> 256"),
    # U-Net (Ronneberger et al. 2015) up-convolutions, 2x2 stride 2, batch 16 at 256^2 input
    Config("unet-up1", 16, 1024, 512, 2, 16, stride=2, bias=True, source="U-Net up-conv 16 -> 32"),
    Config("unet-up4", 16, 128, 64, 2, 128, stride=2, bias=True, source="U-Net up-conv 128 -> 256"),
    # Mask R-CNN mask head (He et al. 2017; torchvision MaskRCNNPredictor): 256 -> 256 k2 s2 on
    # 14x14 RoIs, 512 RoIs per batch of 2 images
    Config("maskrcnn", 512, 256, 256, 2, 14, stride=2, bias=True, source="Mask R-CNN mask head"),
    # Keypoint R-CNN (torchvision KeypointRCNNPredictor): 512 -> 17 k4 s2 p1 on 14x14 RoIs
    Config("kprcnn", 512, 512, 17, 4, 14, stride=2, padding=1, bias=True,
           source="Keypoint R-CNN keypoint head"),
    # SimpleBaselines pose (Xiao et al. 2018): three 256-channel k4 s2 deconvs on ResNet-50's
    # 2048x8x6 feature map (256x192 input), batch 32
    Config("pose-d1", 32, 2048, 256, 4, (8, 6), stride=2, padding=1, source="SimpleBaselines 1"),
    Config("pose-d2", 32, 256, 256, 4, (16, 12), stride=2, padding=1, source="SimpleBaselines 2"),
    Config("pose-d3", 32, 256, 256, 4, (32, 24), stride=2, padding=1, source="SimpleBaselines 3"),
    # FSRCNN (Dong et al. 2016): the last deconvolution 56 -> 1 k9 s3 p4 op2 (x3), batch 16
    Config("fsrcnn", 16, 56, 1, 9, 32, stride=3, padding=4, output_padding=2, bias=True,
           source="FSRCNN x3 deconvolution"),
    # FCN-8s (Long et al. 2015): the final x8 upsampling, 21 classes, k16 s8 p4, grouped bilinear
    # init but learnable, batch 1 at 512^2
    Config("fcn8s", 1, 21, 21, 16, 64, stride=8, padding=4, source="FCN-8s x8 upsampling"),
    # StyleGAN2's modulated transposed conv (Karras et al. 2020): grouped by batch (groups = N)
    Config("stylegan2", 1, 8 * 512, 8 * 512, 3, 32, stride=2, groups=8,
           source="StyleGAN2 modulated up-conv, batch 8 as groups"),
    # CenterNet (Zhou et al. 2019) DLA/ResNet upsampling: depthwise-style deconvs, batch 32
    Config("centernet-dw", 32, 256, 256, 4, 32, stride=2, padding=1, groups=256,
           source="CenterNet depthwise up-conv"),
    Config("centernet", 32, 256, 128, 4, 32, stride=2, padding=1, source="CenterNet up-conv"),
]


def sweep_configs(n: int, seed: int) -> List[Config]:
    """n random layer configs (seeded) that cover what people train. Per config:
    - batch 1-128 (mostly small powers of two); channels 1-1024 from a list with 1, 3 and
      non-multiples of 8 (21, 56, 96, 320, ...);
    - kernel 1-9, sometimes 16; stride 1-4 or 8 (at most the kernel, or 2 for a 1x1 kernel);
      dilation 1 (85%) or 2; padding 0..(kernel-1)*dilation/2; output_padding below
      max(stride, dilation);
    - groups 1 (70%), 2, 4, 8, 32 where they divide both channel counts (22%), or depthwise
      (8%: Cout = groups = Cin);
    - input 1x1 to 256x256, square (75%) or not; bias on or off; NCHW or channels_last (25%);
    - forward work 1 MFLOP to 200 GFLOP and tensors under 512 MB (the batch, then the spatial
      size, are halved until it fits), so that a call takes ~10 us to a few ms on an H100.
    Configs are drawn until valid; the same (n, seed) always gives the same list."""
    import random

    rng = random.Random(seed)
    chans = [1, 3, 4, 8, 16, 21, 32, 48, 56, 64, 96, 128, 192, 256, 320, 384, 512, 768, 1024]
    out: List[Config] = []
    while len(out) < n:
        N = rng.choice([1, 1, 2, 4, 8, 8, 16, 16, 32, 64, 128])
        cin, cout = rng.choice(chans), rng.choice(chans)
        k = rng.choice([1, 2, 3, 3, 4, 4, 5, 7, 9]) if rng.random() > 0.03 else 16
        kk = (k, k) if rng.random() < 0.85 else (k, rng.choice([1, 3, 5]))
        st = rng.choice([1, 1, 2, 2, 2, 3, 4]) if rng.random() > 0.04 else 8
        st = min(st, max(kk[0], 2))
        d = 1 if rng.random() < 0.85 else 2
        pad = rng.randint(0, max(0, (kk[0] - 1) * d // 2))
        op = rng.randint(0, max(st, d) - 1) if rng.random() < 0.3 else 0
        r = rng.random()
        g = 1
        if r > 0.92 and cin > 1:
            cout = g = cin  # depthwise (CenterNet-style upsampling)
        elif r > 0.7:
            opts = [v for v in (2, 4, 8, 32) if cin % v == 0 and cout % v == 0]
            if opts:
                g = rng.choice(opts)
        H = rng.choice([1, 2, 4, 7, 8, 13, 16, 28, 32, 56, 64, 100, 128, 256])
        W = H if rng.random() < 0.75 else rng.choice([1, 4, 8, 16, 24, 32, 64, 128])
        cfg = Config(f"sw{seed}-{len(out)}", N, cin, cout, kk, (H, W), stride=(st, st),
                     padding=(pad, pad), output_padding=(op, op), dilation=(d, d), groups=g,
                     bias=rng.random() < 0.5, channels_last=rng.random() < 0.25)
        def small_enough(c):
            n_el = c.numels()
            return (c.fwd_flops() <= 2e11
                    and 4 * max(n_el["x"], n_el["out"], n_el["w"]) <= 512 * 2 ** 20)

        for _ in range(40):  # fit the work bound: halve N, then the spatial size
            if small_enough(cfg):
                break
            if cfg.N > 1:
                cfg = cfg.scaled(cfg.N // 2, cfg.H, cfg.W)
            elif max(cfg.H, cfg.W) > 1:
                cfg = cfg.scaled(1, max(1, cfg.H // 2), max(1, cfg.W // 2))
            else:
                break
        if cfg.valid() and cfg.fwd_flops() >= 1e6 and small_enough(cfg):
            out.append(cfg)
    return out


def parse_layer(text: str) -> Config:
    """--layer "N,Cin,Cout,k,H,W[,stride,padding,output_padding,groups,dilation,bias,
    channels_last]": one int for k, stride, padding, output_padding, dilation (square), or the
    18-field form that Config.layer_string() prints (kh,kw ... bias,channels_last)."""
    v = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    if len(v) == 18:
        (N, ci, co, kh, kw, H, W, sh, sw, ph, pw, oph, opw, dh, dw, g, b, cl) = v
        cfg = Config("layer", N, ci, co, (kh, kw), (H, W), (sh, sw), (ph, pw), (oph, opw),
                     (dh, dw), g, bool(b), bool(cl))
    elif 6 <= len(v) <= 13:
        names = ["N", "Cin", "Cout", "k", "H", "W", "stride", "padding", "output_padding",
                 "groups", "dilation", "bias", "channels_last"]
        d = dict(zip(names, v))
        cfg = Config("layer", d["N"], d["Cin"], d["Cout"], d["k"], (d["H"], d["W"]),
                     d.get("stride", 1), d.get("padding", 0), d.get("output_padding", 0),
                     d.get("dilation", 1), d.get("groups", 1), bool(d.get("bias", 0)),
                     bool(d.get("channels_last", 0)))
    else:
        raise SystemExit(f"--layer needs 6 to 13 (or 18) comma-separated ints, got {text!r}")
    if not cfg.valid():
        raise SystemExit(f"--layer {text!r} is not a valid conv_transpose2d: {cfg.describe()}")
    return cfg


DTYPES = {"fp32": torch.float32, "fp32-ieee": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16}
PASSES = ("fwd", "bwd", "fwdbwd", "fwdbwd-tuned")
PASS_FLOP_MULT = {"fwd": 1, "bwd": 2, "fwdbwd": 3, "fwdbwd-tuned": 3}
# What each pass computes (fwdbwd-tuned is fwdbwd timed under cudnn.benchmark = True).
PASS_BASE = {"fwd": "fwd", "bwd": "bwd", "fwdbwd": "fwdbwd", "fwdbwd-tuned": "fwdbwd"}

# Used when nothing is measured (and no flag given). H100 SXM-ish dense numbers.
DEFAULT_PEAKS_CUDA = {"bf16": 800.0, "fp16": 800.0, "tf32": 400.0, "fp32": 60.0, "bw": 3.0}
DEFAULT_PEAKS_CPU = {"bf16": 0.1, "fp16": 0.1, "tf32": 0.1, "fp32": 0.1, "bw": 0.01}
PEAK_KEY = {"fp32": "tf32", "fp32-ieee": "fp32", "bf16": "bf16", "fp16": "fp16"}


def cpu_scale(cfg: Config, gflop_budget: float) -> Tuple[Config, str]:
    """Scale a config down for CPU runs until the forward fits in the FLOP budget. Kernel,
    stride, padding, output_padding, dilation, groups and bias are kept. In order: halve N down
    to 1; halve the larger spatial dim while it is > 32; halve Cin and Cout once (if that keeps
    them divisible by groups); halve the larger spatial dim again, down to 4."""
    N, H, W, Cin, Cout = cfg.N, cfg.H, cfg.W, cfg.Cin, cfg.Cout

    def make():
        c = cfg.scaled(N, H, W)
        c.Cin, c.Cout = Cin, Cout
        return c

    c = cfg
    halved_ch = False
    while c.fwd_flops() > gflop_budget * 1e9:
        if N > 1:
            N = max(1, N // 2)
        elif max(H, W) > 32:
            if H >= W:
                H //= 2
            else:
                W //= 2
        elif (not halved_ch and Cin % (2 * cfg.groups) == 0 and Cout % (2 * cfg.groups) == 0):
            Cin, Cout, halved_ch = Cin // 2, Cout // 2, True
        elif max(H, W) > 4:
            if H >= W:
                H = max(4, H // 2)
            else:
                W = max(4, W // 2)
        else:
            break
        c = make()
    if c is cfg:
        return c, "unscaled"
    parts = []
    if N != cfg.N:
        parts.append(f"N {cfg.N}->{N}")
    if (H, W) != (cfg.H, cfg.W):
        parts.append(f"HxW {cfg.H}x{cfg.W}->{H}x{W}")
    if halved_ch:
        parts.append(f"channels {cfg.Cin}->{cfg.Cout} halved to {Cin}->{Cout}")
    return c, ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Precision flags
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def precision(dtype_name: str):
    """fp32: cudnn TF32 on (torch default). fp32-ieee: cudnn and cuBLAS TF32 off. Restored after."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        try:
            if dtype_name == "fp32":
                torch.backends.cudnn.allow_tf32 = True
            elif dtype_name == "fp32-ieee":
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False
            yield
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


@contextlib.contextmanager
def cudnn_benchmark(on: bool):
    """torch.backends.cudnn.benchmark = on, restored after (nothing else changed)."""
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old


def tf32_flags() -> Dict[str, bool]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


# ---------------------------------------------------------------------------------------------
# Timers
# ---------------------------------------------------------------------------------------------


def _cuda_event_timer(warmup_ms: float, rep_ms: float, min_reps: int = 20):
    def timer(fn: Callable[[], Any]) -> float:
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(3):
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 3, 1e-3)
        for _ in range(max(1, int(warmup_ms / est))):
            fn()
        n = min(1000, max(min_reps, int(rep_ms / est)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends))

    return timer


def make_cuda_timer(quick: bool):
    warmup, rep = (10, 40) if quick else (25, 100)
    try:
        from triton.testing import do_bench

        def timer(fn):
            return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))

        x = torch.ones(1024, device="cuda")
        timer(lambda: x.add_(1))  # make sure it works here before relying on it
        return timer, f"triton.testing.do_bench(warmup={warmup}, rep={rep}, median)"
    except Exception as e:  # triton missing or broken: CUDA events
        print(f"[bench] triton do_bench unavailable ({type(e).__name__}: {e}); using CUDA events",
              file=sys.stderr)
        return (_cuda_event_timer(warmup, rep),
                f"CUDA events (warmup {warmup} ms, median of >= 20 runs over ~{rep} ms)")


def make_cpu_timer(quick: bool):
    warmup, reps = (1, 3) if quick else (2, 7)

    def timer(fn):
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    return timer, f"time.perf_counter, {warmup} warmup + median of {reps}"


# ---------------------------------------------------------------------------------------------
# Peaks
# ---------------------------------------------------------------------------------------------


def measure_peaks(device: str, timer, needed: Sequence[str]) -> Dict[str, float]:
    """TFLOP/s for the matmul keys in `needed` and TB/s for "bw"."""
    out: Dict[str, float] = {}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if "bw" in needed:
        nbytes = (1 << 30) if device == "cuda" else (256 << 20)
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        t = timer(lambda: dst.copy_(src))
        out["bw"] = 2 * nbytes / (t * 1e-3) / 1e12
        del src, dst
    n = 8192 if device == "cuda" else 1024
    for key in ("bf16", "fp16", "tf32", "fp32"):
        if key not in needed:
            continue
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(key, torch.float32)
        a = torch.randn(n, n, device=device, dtype=dt)
        b = torch.randn(n, n, device=device, dtype=dt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
            try:
                t = timer(lambda: torch.mm(a, b))
            finally:
                torch.backends.cuda.matmul.allow_tf32 = old
        out[key] = 2 * n ** 3 / (t * 1e-3) / 1e12
        del a, b
    sync()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def resolve_peaks(args, device: str, timer, dtype_names: Sequence[str]):
    flags = {"bf16": args.peak_tflops_bf16, "fp16": args.peak_tflops_fp16,
             "tf32": args.peak_tflops_tf32, "fp32": args.peak_tflops_fp32,
             "bw": args.bandwidth_tbs}
    needed = sorted({PEAK_KEY[d] for d in dtype_names} | {"bw"})
    if device != "cpu" and "fp32-ieee" in dtype_names:  # its floor uses tf32 / 3, fp16 / 3
        needed = sorted(set(needed) | {"tf32", "fp16"})
    if device == "cpu":  # no TF32 on CPU: fp32 rows use the fp32 peak
        needed = sorted({k if k != "tf32" else "fp32" for k in needed} | {"fp32"})
    to_measure = [k for k in needed if flags[k] is None]
    measured: Dict[str, float] = {}
    if to_measure and not args.no_measure_peaks:
        print(f"[bench] measuring peaks: {', '.join(to_measure)} ...", file=sys.stderr)
        try:
            measured = measure_peaks(device, timer, to_measure)
        except Exception as e:
            print(f"[bench] peak measurement failed ({type(e).__name__}: {e}); using defaults",
                  file=sys.stderr)
    defaults = DEFAULT_PEAKS_CPU if device == "cpu" else DEFAULT_PEAKS_CUDA
    peaks, source = {}, {}
    for k in needed:
        if flags[k] is not None:
            peaks[k], source[k] = float(flags[k]), "flag"
        elif k in measured:
            peaks[k], source[k] = measured[k], "measured"
        else:
            peaks[k], source[k] = defaults[k], "default"
    if device == "cpu" and "fp32" in peaks:
        peaks["tf32"], source["tf32"] = peaks["fp32"], source["fp32"] + ", =fp32 on CPU"
        for k in ("bf16", "fp16"):  # CPUs without native bf16/fp16 math convert to fp32
            if k in peaks and peaks[k] < peaks["fp32"]:
                peaks[k], source[k] = peaks["fp32"], source[k] + ", raised to fp32 peak"
    return peaks, source


def peaks_line(peaks, source) -> str:
    parts = []
    for k in ("bf16", "fp16", "tf32", "fp32"):
        if k in peaks:
            v = peaks[k]
            num = f"{v:.1f} TFLOP/s" if v >= 10 else f"{v * 1e3:.1f} GFLOP/s"
            parts.append(f"{k} {num} ({source[k]})")
    v = peaks["bw"]
    num = f"{v:.2f} TB/s" if v >= 1 else f"{v * 1e3:.1f} GB/s"
    parts.append(f"bandwidth {num} ({source['bw']})")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------------------------


class TorchImpl:
    name = "torch"

    @staticmethod
    def forward(x, w, b, stride, padding, output_padding, groups, dilation):
        return F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)

    @staticmethod
    def backward(go, x, w, stride, padding, output_padding, groups, dilation):
        r = torch.ops.aten.convolution_backward(go, x, w, None, stride, padding, dilation, True,
                                                output_padding, groups, [True, True, False])
        return r[0], r[1]


class Convt2dImpl:
    name = "convt2d"

    def __init__(self):
        import convt2d  # noqa: F401  (loads the ops)

        self.mod = convt2d

    def forward(self, x, w, b, stride, padding, output_padding, groups, dilation):
        return self.mod.forward(x, w, b, stride, padding, output_padding, groups, dilation)

    def algorithms(self):
        """What the latest CUDA call of each pass ran (convt2d.last_algorithms(): process-wide,
        so a CPU row would read earlier GPU calls; run_row reads it for GPU rows only)."""
        try:
            return dict(self.mod.last_algorithms())
        except Exception:
            return {}

    @staticmethod
    def backward(go, x, w, stride, padding, output_padding, groups, dilation):
        r = torch.ops.convt2d.backward(go, x, w, stride, padding, output_padding, groups,
                                       dilation, [True, True, False])
        return r[0], r[1]


# ---------------------------------------------------------------------------------------------
# One row
# ---------------------------------------------------------------------------------------------


def make_inputs(cfg: Config, dtype, device, pass_name, gen, requires_grad=False):
    pass_name = PASS_BASE[pass_name]
    kh, kw = cfg.k
    ho, wo = cfg.out_hw
    fan = max(1.0, (cfg.Cin // cfg.groups) * kh * kw / (cfg.stride[0] * cfg.stride[1]))

    def rnd(*shape, scale=1.0):
        t = torch.randn(*shape, device=device, dtype=torch.float32, generator=gen)
        return (t * scale).to(dtype)

    x = rnd(cfg.N, cfg.Cin, cfg.H, cfg.W)
    w = rnd(cfg.Cin, cfg.Cout // cfg.groups, kh, kw, scale=1 / math.sqrt(fan))
    s = {"x": x, "w": w}
    if pass_name in ("fwd", "fwdbwd"):
        s["b"] = rnd(cfg.Cout) if cfg.bias else None
    if pass_name in ("bwd", "fwdbwd"):
        s["go"] = rnd(cfg.N, cfg.Cout, ho, wo)
    if cfg.channels_last:
        for key in ("x", "go"):
            if key in s:
                s[key] = s[key].contiguous(memory_format=torch.channels_last)
    if pass_name == "fwdbwd":
        s["x"].requires_grad_(True)
        s["w"].requires_grad_(True)
    return s


def set_bytes(s) -> int:
    return sum(t.numel() * t.element_size() for t in s.values() if t is not None)


def make_call(impl, cfg: Config, pass_name: str):
    """fn(set) -> tuple of result tensors."""
    pass_name = PASS_BASE[pass_name]
    stride, padding, output_padding, groups, dilation = cfg.args()
    if pass_name == "fwd":
        def call(s):
            return (impl.forward(s["x"], s["w"], s["b"], stride, padding, output_padding,
                                 groups, dilation),)
    elif pass_name == "bwd":
        def call(s):
            return impl.backward(s["go"], s["x"], s["w"], stride, padding, output_padding,
                                 groups, dilation)
    else:
        def call(s):
            out = impl.forward(s["x"], s["w"], s["b"], stride, padding, output_padding, groups,
                               dilation)
            gx, gw = torch.autograd.grad(out, [s["x"], s["w"]], s["go"])
            return (out.detach(), gx, gw)
    return call


def reference(cfg: Config, pass_name: str, s) -> Tuple[torch.Tensor, ...]:
    """float64 results from the same (rounded) inputs, via F.conv_transpose2d / autograd."""
    pass_name = PASS_BASE[pass_name]
    stride, padding, output_padding, groups, dilation = cfg.args()
    x = s["x"].detach().double()
    w = s["w"].detach().double()
    b = s.get("b")
    b = b.double() if b is not None else None
    if pass_name == "fwd":
        with torch.no_grad():
            return (F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups,
                                       dilation),)
    x.requires_grad_(True)
    w.requires_grad_(True)
    with torch.enable_grad():
        out = F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
        gx, gw = torch.autograd.grad(out, [x, w], s["go"].double())
    return (gx, gw) if pass_name == "bwd" else (out.detach(), gx, gw)


def rel_err(got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor]) -> float:
    errs = []
    for g, r in zip(got, ref):
        if tuple(g.shape) != tuple(r.shape):
            raise RuntimeError(f"shape mismatch: got {tuple(g.shape)}, expected {tuple(r.shape)}")
        den = r.norm().item()
        num = (g.detach().double() - r).norm().item()
        errs.append(num / den if den > 0 else num)
    return max(errs)


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


def run_row(cfg: Config, dtype_name: str, pass_name: str, impls, timer, device, peaks, args,
            l2_bytes: int, scale_note: str) -> Dict[str, Any]:
    dtype = DTYPES[dtype_name]
    es = torch.empty((), dtype=dtype).element_size()
    n = cfg.numels()
    fl = cfg.fwd_flops() * PASS_FLOP_MULT[pass_name]
    fwd_b = (n["x"] + n["w"] + n["out"] + n["b"]) * es
    bwd_b = (n["out"] + 2 * n["x"] + 2 * n["w"]) * es
    nbytes = {"fwd": fwd_b, "bwd": bwd_b, "fwdbwd": fwd_b + bwd_b}[PASS_BASE[pass_name]]
    peak = peaks[PEAK_KEY[dtype_name]]
    if dtype_name == "fp32-ieee" and device != "cpu":  # 3xTF32 / 3xFP16 on tensor cores
        peak = max([peak] + [peaks[k] / 3 for k in ("tf32", "fp16") if k in peaks])
    floor_ms = max(fl / (peak * 1e12), nbytes / (peaks["bw"] * 1e12)) * 1e3
    row: Dict[str, Any] = {
        "config": cfg.name, "dtype": dtype_name, "pass": pass_name, "shape": cfg.describe(),
        "layer": cfg.layer_string(), "source": cfg.source,
        "scaling": scale_note, "flops": fl, "bytes": nbytes, "floor_ms": floor_ms,
        "bound": "compute" if fl / (peak * 1e12) >= nbytes / (peaks["bw"] * 1e12) else "memory",
        "torch_ms": None, "convt2d_ms": None, "speedup": None, "err": None, "torch_err": None,
        "pct_floor": None, "torch_pct_floor": None, "error": None, "torch_error": None,
        "n_sets": 1, "convt2d_off_ms": None, "on_off": None, "err_off": None, "error_off": None,
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sets: List[Dict[str, Any]] = []
    ref = None
    try:
        with precision(dtype_name):
            row["tf32"] = tf32_flags()
            gen = torch.Generator(device=device)
            gen.manual_seed(args.seed)
            sets.append(make_inputs(cfg, dtype, device, pass_name, gen))
            if device == "cuda":  # rotate input sets so that they don't all sit in L2
                sb = set_bytes(sets[0])
                if sb < 2 * l2_bytes:
                    k = min(64, 2 * l2_bytes // max(1, sb) + 1)
                    for _ in range(k - 1):
                        sets.append(make_inputs(cfg, dtype, device, pass_name, gen))
            row["n_sets"] = len(sets)
            ref = reference(cfg, pass_name, sets[0])
            sync()
    except Exception as e:
        row["error"] = row["torch_error"] = "setup: " + _short(e)
        _cleanup(device)
        return row

    grad_ctx = torch.enable_grad if PASS_BASE[pass_name] == "fwdbwd" else torch.no_grad
    tuned = pass_name == "fwdbwd-tuned"
    on = True if tuned else bool(args.cudnn_benchmark)
    sides = [("torch", impls[0], on), ("convt2d", impls[1], on)]
    if tuned:
        sides.append(("convt2d_off", impls[1], False))
    for side, impl, bench_on in sides:
        key_ms = f"{side}_ms"
        key_err = {"torch": "torch_err", "convt2d": "err", "convt2d_off": "err_off"}[side]
        key_error = {"torch": "torch_error", "convt2d": "error", "convt2d_off": "error_off"}[side]
        try:
            call = make_call(impl, cfg, pass_name)
            with precision(dtype_name), grad_ctx(), cudnn_benchmark(bench_on):
                got = call(sets[0])
                sync()
                row[key_err] = rel_err(got, ref)
                del got
                if len(sets) == 1:
                    s0 = sets[0]
                    fn = lambda: call(s0)  # noqa: E731
                else:
                    it = itertools.cycle(sets)
                    fn = lambda: call(next(it))  # noqa: E731
                row[key_ms] = timer(fn)
                sync()
                # (the planner's record is process-wide: on the CPU it would be stale)
                if side == "convt2d" and device == "cuda" and hasattr(impl, "algorithms"):
                    row["algos"] = pass_algorithms(impl.algorithms(), pass_name)
        except Exception as e:
            row[key_error] = _short(e)
            if args.verbose:
                traceback.print_exc()
            try:
                sync()
            except Exception:
                pass
    if row["torch_ms"] and row["convt2d_ms"]:
        row["speedup"] = row["torch_ms"] / row["convt2d_ms"]
    if row["convt2d_off_ms"] and row["convt2d_ms"]:
        row["on_off"] = row["convt2d_ms"] / row["convt2d_off_ms"]
    if row["convt2d_ms"]:
        row["pct_floor"] = floor_ms / row["convt2d_ms"] * 100
    if row["torch_ms"]:
        row["torch_pct_floor"] = floor_ms / row["torch_ms"] * 100
    del sets, ref
    _cleanup(device)
    return row


def _cleanup(device):
    if device == "cuda":
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Whole training steps (--e2e)
# ---------------------------------------------------------------------------------------------


def _dcgan_generator(nz=100, ngf=64, nc=3):
    """DCGAN's generator (Radford et al. 2016; the PyTorch examples' dcgan/main.py)."""
    import torch.nn as nn

    layers, c_in = [], nz
    for i, c_out in enumerate([ngf * 8, ngf * 4, ngf * 2, ngf]):
        layers += [nn.ConvTranspose2d(c_in, c_out, 4, 1 if i == 0 else 2, 0 if i == 0 else 1,
                                      bias=False), nn.BatchNorm2d(c_out), nn.ReLU(True)]
        c_in = c_out
    layers += [nn.ConvTranspose2d(c_in, nc, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def _pix2pix_unet256(ngf=64, nc=3):
    """pix2pix's U-Net-256 generator (Isola et al. 2017; its UnetGenerator with 8 downs,
    BatchNorm, no dropout): stride-2 k4 convs down to 1x1, transposed convs back up with skip
    concatenation."""
    import torch.nn as nn

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            enc = [nc, ngf, ngf * 2, ngf * 4] + [ngf * 8] * 5
            self.downs = nn.ModuleList()
            for i in range(8):
                m = [nn.LeakyReLU(0.2, True)] if i else []
                m.append(nn.Conv2d(enc[i], enc[i + 1], 4, 2, 1, bias=False))
                if 0 < i < 7:
                    m.append(nn.BatchNorm2d(enc[i + 1]))
                self.downs.append(nn.Sequential(*m))
            self.ups = nn.ModuleList()
            for i in range(8):  # innermost first
                c_in = enc[8 - i] * (1 if i == 0 else 2)
                c_out = enc[7 - i] if i < 7 else nc
                m = [nn.ReLU(True), nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=(i == 7))]
                m.append(nn.BatchNorm2d(c_out) if i < 7 else nn.Tanh())
                self.ups.append(nn.Sequential(*m))

        def forward(self, x):
            skips = []
            for d in self.downs:
                x = d(x)
                skips.append(x)
            x = self.ups[0](skips[-1])
            for i in range(1, 8):
                x = self.ups[i](torch.cat([x, skips[7 - i]], 1))
            return x

    return UNet()


E2E_MODELS = {
    # name: (builder, batch, input shape without batch)
    "dcgan-G": (_dcgan_generator, 128, (100, 1, 1)),
    "pix2pix-G": (_pix2pix_unet256, 8, (3, 256, 256)),
}


def run_e2e(timer, args) -> List[Dict[str, Any]]:
    """Training-step time (forward, MSE loss, backward, SGD step) of each model with
    nn.ConvTranspose2d against convt2d.convert(model), fp32 (torch defaults) and bf16 autocast,
    with cudnn.benchmark off and on (both sides)."""
    import copy

    import convt2d

    rows = []
    for name, (build, n, shape) in E2E_MODELS.items():
        for mode in ("fp32", "bf16-autocast"):
            for bench_on in (False, True):
                torch.manual_seed(args.seed)
                ref_model = build().cuda()
                ours = convt2d.convert(copy.deepcopy(ref_model))
                x = torch.randn(n, *shape, device="cuda")
                with torch.no_grad():
                    target = torch.randn_like(ref_model(x))
                row = {"model": name, "mode": mode, "cudnn_benchmark": bench_on,
                       "torch_ms": None, "convt2d_ms": None, "speedup": None, "error": None}
                for side, model in (("torch", ref_model), ("convt2d", ours)):
                    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

                    def step(model=model, opt=opt):
                        opt.zero_grad(set_to_none=True)
                        with torch.autocast("cuda", dtype=torch.bfloat16,
                                            enabled=(mode == "bf16-autocast")):
                            out = model(x)
                        loss = F.mse_loss(out.float(), target)
                        loss.backward()
                        opt.step()

                    try:
                        with cudnn_benchmark(bench_on):
                            step()  # tunes (benchmark on), first-call costs
                            torch.cuda.synchronize()
                            row[f"{side}_ms"] = timer(step)
                    except Exception as e:
                        row["error"] = f"{side}: {_short(e)}"
                        if args.verbose:
                            traceback.print_exc()
                if row["torch_ms"] and row["convt2d_ms"]:
                    row["speedup"] = row["torch_ms"] / row["convt2d_ms"]
                rows.append(row)
                print(f"[e2e] {name:10s} {mode:13s} benchmark {'on ' if bench_on else 'off'}: "
                      f"torch {_fmt_ms(row['torch_ms'])} ms, convt2d {_fmt_ms(row['convt2d_ms'])} "
                      f"ms, " + (f"{row['speedup']:.2f}x" if row["speedup"] else
                                 f"ERROR {row['error']}"), file=sys.stderr, flush=True)
                del ref_model, ours, x, target
                _cleanup("cuda")
    return rows


# Tiny layers for --host: the GPU finishes each kernel in a few microseconds, so a loop of
# calls measures the host's work per call (argument handling, planning, allocation, launches).
HOST_LAYERS = [
    Config("tiny-1x1", 1, 8, 8, 1, 4),
    Config("tiny-k4s2", 1, 16, 8, 4, 4, stride=2, padding=1, bias=True),
    Config("tiny-dw", 1, 16, 16, 3, 8, stride=2, padding=1, groups=16),
]


def run_host_overhead(device: str, args) -> List[Dict[str, Any]]:
    """Wall time per call of a loop of calls (one sync at the end), torch against convt2d,
    forward and forward + backward (autograd), fp32: on the GPU this is host time per call
    wherever the kernels take less than it."""
    import convt2d

    calls = 200 if args.quick else 2000
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for cfg in HOST_LAYERS:
        stride, padding, output_padding, groups, dilation = cfg.args()
        x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device=device, requires_grad=True)
        w = torch.randn(cfg.Cin, cfg.Cout // cfg.groups, *cfg.k, device=device,
                        requires_grad=True)
        b = torch.randn(cfg.Cout, device=device) if cfg.bias else None
        for pass_name in ("fwd", "fwdbwd"):
            row = {"config": cfg.name, "shape": cfg.describe(), "pass": pass_name}
            for side, fn in (("torch", F.conv_transpose2d), ("convt2d", convt2d.forward)):
                def call(fn=fn):
                    if pass_name == "fwd":
                        with torch.no_grad():
                            return fn(x, w, b, stride, padding, output_padding, groups, dilation)
                    y = fn(x, w, b, stride, padding, output_padding, groups, dilation)
                    return torch.autograd.grad(y, [x, w], torch.ones_like(y))

                for _ in range(max(10, calls // 20)):  # warm-up
                    call()
                sync()
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        call()
                    sync()
                    best = min(best, (time.perf_counter() - t0) / calls * 1e6)
                row[f"{side}_us"] = best
            row["diff_us"] = row["convt2d_us"] - row["torch_us"]
            rows.append(row)
            print(f"[host] {cfg.name:10s} {pass_name:6s} torch {row['torch_us']:.1f} us, "
                  f"convt2d {row['convt2d_us']:.1f} us per call", file=sys.stderr, flush=True)
    return rows


def host_markdown(rows) -> str:
    L = ["Per-call time of tiny layers (fp32, a loop of calls, best of 3; host-bound on a GPU):",
         "", "| layer | shape | pass | torch us | convt2d us | convt2d - torch |",
         "|---|---|---|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['config']} | {r['shape']} | {r['pass']} | {r['torch_us']:.1f} | "
                 f"{r['convt2d_us']:.1f} | {r['diff_us']:+.1f} |")
    return "\n".join(L) + "\n"


def e2e_markdown(rows) -> str:
    L = ["Whole training steps (forward, MSE loss, backward, SGD step; nn.ConvTranspose2d vs "
         "convt2d.convert(model)):", "",
         "| model | mode | cudnn.benchmark | torch ms | convt2d ms | speedup |",
         "|---|---|---|---:|---:|---:|"]
    for r in rows:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else f"ERR: {r['error']}"
        L.append(f"| {r['model']} | {r['mode']} | {'on' if r['cudnn_benchmark'] else 'off'} | "
                 f"{_fmt_ms(r['torch_ms'])} | {_fmt_ms(r['convt2d_ms'])} | {sp} |")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def _fmt_ms(v):
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 0.1 else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def _fmt_si(v, unit):
    for div, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.2f} {p}{unit}"
    return f"{v:.0f} {unit}"


def _fmt_err(v):
    return "-" if v is None else f"{v:.1e}"


def geomeans(rows) -> List[Dict[str, Any]]:
    out = []
    keys = []
    for r in rows:
        k = (r["dtype"], r["pass"])
        if k not in keys:
            keys.append(k)
    for d, p in keys:
        sp = [r["speedup"] for r in rows if r["dtype"] == d and r["pass"] == p and r["speedup"]]
        n_all = sum(1 for r in rows if r["dtype"] == d and r["pass"] == p)
        g = statistics.geometric_mean(sp) if sp else None
        out.append({"dtype": d, "pass": p, "geomean_speedup": g, "rows": len(sp),
                    "rows_total": n_all})
    return out


def markdown(rows, env, gms, impl_name) -> str:
    other = "convt2d" if impl_name == "convt2d" else "torch(as convt2d)"
    L = []
    L.append(f"# convt2d vs torch conv_transpose2d — {env['date']}")
    L.append("")
    L.append(f"- device: **{env['device_name']}** ({env['device']}), torch {env['torch']}, "
             f"cuDNN {env['cudnn']}, CUDA {env['cuda']}"
             + (f", threads {env['threads']}" if env["device"] == "cpu" else ""))
    L.append(f"- compared: torch vs {other}; timing: {env['timer']}")
    L.append(f"- peaks used: {env['peaks_line']}")
    if env["device"] == "cpu":
        L.append(f"- CPU mode: shapes scaled down until the forward is <= {env['cpu_gflop']} "
                 f"GFLOP (kernel, stride, padding, output_padding, dilation, groups, bias kept; "
                 f"N halved to 1, then the larger spatial dim halved down to 32, then channels "
                 f"halved once, then spatial again); see the shapes table. CPU timings are "
                 f"noisy and not representative of anything but correctness of the harness.")
        L.append(f"- CPU load average at start: {env.get('loadavg_1m')} on {env.get('cpu_count')} "
                 f"CPUs (with other load, multi-threaded torch CPU kernels slow down a lot; "
                 f"try --threads 1)")
    L.append("")
    hdr = ["config", "dtype", "pass", "torch ms", f"{other} ms", "speedup", "err", "torch err",
           "FLOPs", "bytes", "floor ms", "% floor"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(hdr) - 3)) + "|")
    for r in rows:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "ERR" if (r["error"] or r["torch_error"]) else "-"
        L.append("| " + " | ".join([
            r["config"], r["dtype"], r["pass"], _fmt_ms(r["torch_ms"]), _fmt_ms(r["convt2d_ms"]),
            sp, _fmt_err(r["err"]), _fmt_err(r["torch_err"]), _fmt_si(r["flops"], "FLOP"),
            _fmt_si(r["bytes"], "B"), _fmt_ms(r["floor_ms"]),
            f"{r['pct_floor']:.1f}%" if r["pct_floor"] is not None else "-"]) + " |")
    L.append("")
    L.append("Geometric-mean speedup (torch ms / convt2d ms; rows without both timings left out):")
    L.append("")
    L.append("| dtype | pass | geomean speedup | rows |")
    L.append("|---|---|---:|---:|")
    for g in gms:
        v = f"{g['geomean_speedup']:.3f}x" if g["geomean_speedup"] else "-"
        L.append(f"| {g['dtype']} | {g['pass']} | {v} | {g['rows']}/{g['rows_total']} |")
    tuned = [r for r in rows if r["pass"] == "fwdbwd-tuned"]
    if tuned:
        L.append("")
        L.append("cudnn.benchmark = True, forward + backward: both sides tuned on their first "
                 "(untimed) call; \"on / off\" = convt2d with benchmark on / convt2d with it off "
                 "(above 1.05: tuning costs convt2d time):")
        L.append("")
        L.append("| config | dtype | torch on ms | convt2d on ms | convt2d off ms | speedup (on) "
                 "| on / off |")
        L.append("|---|---|---:|---:|---:|---:|---:|")
        for r in tuned:
            sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
            oo = f"{r['on_off']:.3f}" if r["on_off"] else "-"
            L.append(f"| {r['config']} | {r['dtype']} | {_fmt_ms(r['torch_ms'])} | "
                     f"{_fmt_ms(r['convt2d_ms'])} | {_fmt_ms(r['convt2d_off_ms'])} | {sp} | {oo} |")
    errs = [r for r in rows if r["error"] or r["torch_error"] or r.get("error_off")]
    if errs:
        L.append("")
        L.append("Errors:")
        L.append("")
        for r in errs:
            if r["torch_error"]:
                L.append(f"- {r['config']} {r['dtype']} {r['pass']} torch: `{r['torch_error']}`")
            if r["error"] and r["error"] != r["torch_error"]:
                L.append(f"- {r['config']} {r['dtype']} {r['pass']} {other}: `{r['error']}`")
            if r.get("error_off"):
                L.append(f"- {r['config']} {r['dtype']} {r['pass']} {other} (benchmark off): "
                         f"`{r['error_off']}`")
    L.append("")
    L.append("Shapes:")
    L.append("")
    L.append("| config | shape | scaling |")
    L.append("|---|---|---|")
    seen = set()
    for r in rows:
        if r["config"] not in seen:
            seen.add(r["config"])
            L.append(f"| {r['config']} | {r['shape']} | {r['scaling']} |")
    L.append("")
    L.append("Notes: err = ||out - ref|| / ||ref|| vs float64 (max over output / grad_input / "
             "grad_weight for bwd, fwdbwd). FLOPs (fwd) = 2*N*Cin*(Cout/groups)*H*W*kh*kw, "
             "counting taps that land in the cropped padding (the standard count); bwd = 2x, "
             "fwdbwd = 3x. bytes (fwd) = input + weight + output [+ bias]; bwd = read grad_out, "
             "input, weight + write grad_input, grad_weight. floor = max(FLOPs/peak, "
             "bytes/bandwidth); % floor = floor / convt2d ms. fp32 = cudnn TF32 on (torch "
             "default); fp32-ieee = TF32 off (cudnn and cuBLAS), its peak on CUDA max(fp32, "
             "tf32 / 3, fp16 / 3: 3xTF32 and 3xFP16 on tensor cores). bwd times only the backward "
             "op (aten.convolution_backward / convt2d.backward, grad_input + grad_weight).")
    return "\n".join(L) + "\n"


# The shape classes of the issue that asks for speed on every layer (the first that matches):
# what the per-class breakdown of a sweep reports.
SHAPE_CLASSES = ("depthwise", "grouped, <= 8 a group", "dense GEMM", "1-8 outputs",
                 "1-4 inputs", "tiny spatial", "large kernel / stride", "other")


def shape_class(cfg: Config) -> str:
    """A layer's shape class (SHAPE_CLASSES, first match): one input channel per group;
    grouped with at most 8 input or output channels a group; a pass that is one dense GEMM
    (a 1x1 kernel at stride 1, a 1x1 input, kernel == stride without padding or dilation);
    1-8 output channels a group; 1-4 input channels; at most 16 input pixels with 256+
    channels; a kernel of 7+ or a stride of 4+; the rest."""
    g = cfg.groups
    cig, cog = cfg.Cin // g, cfg.Cout // g
    kh, kw = cfg.k
    sh, sw = cfg.stride
    if g > 1 and cig == 1:
        return "depthwise"
    if g > 1 and min(cig, cog) <= 8:
        return "grouped, <= 8 a group"
    plain = cfg.padding == (0, 0) and cfg.output_padding == (0, 0) and cfg.dilation == (1, 1)
    if ((kh, kw) == (1, 1) and (sh, sw) == (1, 1)) or (cfg.H, cfg.W) == (1, 1) or \
            (plain and (kh, kw) == (sh, sw)):
        return "dense GEMM"
    if cog <= 8:
        return "1-8 outputs"
    if cfg.Cin <= 4:
        return "1-4 inputs"
    if cfg.H * cfg.W <= 16 and cfg.Cin >= 256:
        return "tiny spatial"
    if max(kh, kw) >= 7 or max(sh, sw) >= 4:
        return "large kernel / stride"
    return "other"


def class_breakdown(rows) -> List[Dict[str, Any]]:
    """Per shape class x dtype x pass (rows with a speedup and a --layer string): configs,
    geomean speedup, rows at or above 1.0x and below 0.8x."""
    groups: Dict[Any, List[float]] = {}
    for r in rows:
        if not r.get("speedup") or not r.get("layer"):
            continue
        c = shape_class(parse_layer(r["layer"]))
        groups.setdefault((c, r["dtype"], r["pass"]), []).append(r["speedup"])
    out = []
    for (c, dt, ps), v in groups.items():
        out.append({"class": c, "dtype": dt, "pass": ps, "n": len(v),
                    "geomean": statistics.geometric_mean(v),
                    "ge_1": sum(x >= 1.0 for x in v), "lt_0_8": sum(x < 0.8 for x in v)})
    out.sort(key=lambda d: (SHAPE_CLASSES.index(d["class"]), d["dtype"], d["pass"]))
    return out


def class_breakdown_markdown(classes) -> str:
    order = list(DTYPES)
    cols = sorted({(d["dtype"], d["pass"]) for d in classes},
                  key=lambda k: (order.index(k[0]) if k[0] in order else len(order),
                                 PASSES.index(k[1]) if k[1] in PASSES else len(PASSES)))
    if not cols:
        return ""
    cell = {(d["class"], d["dtype"], d["pass"]): d for d in classes}
    L = ["By shape class (`shape_class` in `convt2d/bench.py`): geomean speedup, configs, "
         "and how many are below 0.8x:", "",
         "| class | " + " | ".join(f"{dt} {ps}" for dt, ps in cols) + " |",
         "|---|" + "---:|" * len(cols)]
    for c in SHAPE_CLASSES:
        if not any(k[0] == c for k in cell):
            continue
        vals = []
        for dt, ps in cols:
            d = cell.get((c, dt, ps))
            vals.append(f"{d['geomean']:.2f}x ({d['n']}, {d['lt_0_8']} < 0.8)" if d else "-")
        L.append(f"| {c} | " + " | ".join(vals) + " |")
    return "\n".join(L) + "\n"


def distribution(rows, worst: int = 10) -> List[Dict[str, Any]]:
    """Per dtype x pass: configs timed, fraction at or above 1.0x, geomean, min, the `worst`
    slowest configs."""
    out = []
    for g in geomeans(rows):
        rs = [r for r in rows if r["dtype"] == g["dtype"] and r["pass"] == g["pass"]
              and r["speedup"]]
        if not rs:
            continue
        rs.sort(key=lambda r: r["speedup"])
        out.append({"dtype": g["dtype"], "pass": g["pass"], "n": len(rs),
                    "rows_total": g["rows_total"],
                    "frac_ge_1": sum(r["speedup"] >= 1.0 for r in rs) / len(rs),
                    "frac_ge_0_8": sum(r["speedup"] >= 0.8 for r in rs) / len(rs),
                    "geomean": g["geomean_speedup"], "min": rs[0]["speedup"],
                    "worst": [{"config": r["config"], "speedup": r["speedup"],
                               "shape": r["shape"], "layer": r.get("layer"),
                               "ran": ran_string(r)}
                              for r in rs[:worst]]})
    return out


def pass_algorithms(algos, pass_name) -> Dict[str, str]:
    """The entries of convt2d.last_algorithms() that a bench pass sets: fwd its forward; bwd
    the backward transform and both gradients; fwdbwd all four (other entries are left from
    earlier calls)."""
    keep = {"fwd": ("fwd",), "bwd": ("bwd", "dgrad", "wgrad")}.get(
        PASS_BASE[pass_name], ("fwd", "bwd", "dgrad", "wgrad"))
    return {k: v for k, v in algos.items() if k in keep}


def ran_string(row) -> str:
    """What convt2d ran on a row, e.g. "tap_gather: implicit_gemm / tensorop" for a backward
    (the transform, then grad_input / grad_weight), "" where not recorded."""
    a = row.get("algos") or {}
    fwd = a.get("fwd", "")
    grads = " / ".join(a[k] for k in ("dgrad", "wgrad") if k in a)
    bwd = (a["bwd"] + ": " if "bwd" in a and grads else a.get("bwd", "")) + grads
    return ", ".join(t for t in (fwd, bwd) if t)


def distribution_markdown(dist) -> str:
    L = ["Distribution (speedup = torch ms / convt2d ms):", "",
         "| dtype | pass | configs | >= 1.0x | >= 0.8x | geomean | min |",
         "|---|---|---:|---:|---:|---:|---:|"]
    for d in dist:
        L.append(f"| {d['dtype']} | {d['pass']} | {d['n']}/{d['rows_total']} | "
                 f"{100 * d['frac_ge_1']:.0f}% | {100 * d['frac_ge_0_8']:.0f}% | "
                 f"{d['geomean']:.2f}x | {d['min']:.2f}x |")
    for d in dist:
        L += ["", f"Worst {len(d['worst'])} ({d['dtype']} {d['pass']}; `--layer` reproduces one):",
              "", "| speedup | config | shape | convt2d ran | --layer |", "|---:|---|---|---|---|"]
        for w in d["worst"]:
            L.append(f"| {w['speedup']:.2f}x | {w['config']} | {w['shape']} | "
                     f"{w.get('ran', '')} | `{w['layer'] or ''}` |")
    return "\n".join(L) + "\n"


def plot_distribution(rows, env, path) -> bool:
    """Speedup against forward FLOPs, one panel per pass, a colour per dtype."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"[bench] WARNING: matplotlib unavailable ({_short(e)}); no PNG written",
              file=sys.stderr)
        return False
    passes = [p for p in PASSES if any(r["pass"] == p and r["speedup"] for r in rows)]
    dtypes = []
    for r in rows:
        if r["dtype"] not in dtypes:
            dtypes.append(r["dtype"])
    if not passes:
        return False
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(passes), figsize=(5.5 * len(passes), 4.5), squeeze=False)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    for ax, p in zip(axes[0], passes):
        for j, d in enumerate(dtypes):
            rs = [r for r in rows if r["pass"] == p and r["dtype"] == d and r["speedup"]]
            ax.scatter([r["flops"] / PASS_FLOP_MULT[p] for r in rs], [r["speedup"] for r in rs],
                       s=14, alpha=0.75, color=colors[j % len(colors)], label=d)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        fmt = FuncFormatter(lambda v, _: f"{v:g}x")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.set_xlabel("forward FLOPs")
        ax.set_ylabel("speedup (torch / convt2d)")
        ax.set_title(f"{p} (above 1x: convt2d faster)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"convt2d vs torch over {env.get('config_set', 'configs')}\n"
                 f"{env['device_name']}, torch {env['torch']}, cuDNN {env['cudnn']} — "
                 f"{env['date'][:16]}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot(rows, env, path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"[bench] WARNING: matplotlib unavailable ({type(e).__name__}: {e}); "
              f"no PNG written", file=sys.stderr)
        return False
    passes = [p for p in PASSES if any(r["pass"] == p for r in rows)]
    dtypes = []
    configs = []
    for r in rows:
        if r["dtype"] not in dtypes:
            dtypes.append(r["dtype"])
        if r["config"] not in configs:
            configs.append(r["config"])
    by = {(r["config"], r["dtype"], r["pass"]): r for r in rows}
    width = max(8.0, 1.1 * len(configs) * max(1, len(dtypes)) * 0.55 + 2)
    fig, axes = plt.subplots(len(passes), 1, figsize=(width, 3.6 * len(passes) + 0.8),
                             squeeze=False)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3"]
    bw = 0.8 / max(1, len(dtypes))
    sps = [r["speedup"] for r in rows if r["speedup"]]
    lo = min(min(sps + [1.0]) / 2.2, 0.5)
    hi = max(max(sps + [1.0]) * 1.6, 2.0)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = [2.0 ** e for e in range(-10, 11) if lo <= 2.0 ** e <= hi]
    handles = []
    for ax, p in zip(axes[:, 0], passes):
        for j, d in enumerate(dtypes):
            xs, ys = [], []
            for i, c in enumerate(configs):
                r = by.get((c, d, p))
                xpos = i - 0.4 + bw * (j + 0.5)
                if r is None:
                    continue
                sp = r["speedup"]
                if sp:
                    xs.append(xpos)
                    ys.append(sp)
                    up = sp >= 1
                    ax.text(xpos, sp * (1.03 if up else 0.97), f"{sp:.2f}", ha="center",
                            va="bottom" if up else "top", fontsize=7, rotation=90)
                else:
                    ax.text(xpos, 1.03, "ERR", ha="center", va="bottom", fontsize=7,
                            color="red", rotation=90)
            # bars grow from 1x: up = convt2d faster, down = slower
            h = ax.bar(xs, [y - 1.0 for y in ys], bw * 0.92, bottom=1.0,
                       color=colors[j % len(colors)], label=d)
            if ax is axes[0, 0]:
                handles.append(h)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs)
        ax.set_xlim(-0.6, len(configs) - 0.4)
        ax.set_ylabel("speedup (torch / convt2d)", fontsize=9)
        ax.set_title(f"{p}   (above 1x: convt2d faster)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.legend(handles, dtypes, loc="upper right", ncol=len(dtypes), fontsize=8,
               bbox_to_anchor=(0.99, 0.945))
    other = "convt2d" if env["impl"] == "convt2d" else "torch-as-both"
    fig.suptitle(f"{other} vs torch conv_transpose2d\n{env['device_name']}, torch "
                 f"{env['torch']}, cuDNN {env['cudnn']} — {env['date'][:16]}"
                 + (" (CPU, scaled shapes)" if env["device"] == "cpu" else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def _git_rev() -> Optional[str]:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except Exception:
        return None


def environment(device: str, args) -> Dict[str, Any]:
    env: Dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "host": platform.node(),
        "git": _git_rev(),
        "impl": args.impl,
        "quick": args.quick,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "threads": torch.get_num_threads(),
        "seed": args.seed,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env["device_name"] = torch.cuda.get_device_name(0)
        env["sm_count"] = p.multi_processor_count
        env["capability"] = f"{p.major}.{p.minor}"
        env["gpu_mem_gib"] = round(p.total_memory / 2 ** 30, 1)
        env["l2_bytes"] = getattr(p, "L2_cache_size", None)
    else:
        env["device_name"] = _cpu_name()
        env["cpu_gflop"] = args.cpu_gflop
        env["cpu_count"] = os.cpu_count()
        try:
            env["loadavg_1m"] = round(os.getloadavg()[0], 2)
        except OSError:
            env["loadavg_1m"] = None
    return env


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m convt2d.bench",
        description="Time convt2d against torch.nn.functional.conv_transpose2d.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Configs: " + "; ".join(f"{c.name}: {c.describe()}" for c in SUITE))
    ap.add_argument("--cpu", action="store_true",
                    help="run on CPU with scaled-down shapes (see --cpu-gflop)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer timing reps (and, with --cpu, smaller shapes)")
    ap.add_argument("--configs", default=",".join(c.name for c in SUITE),
                    help="comma-separated config names (default: all)")
    ap.add_argument("--dtypes", default="fp32,bf16",
                    help="comma-separated from fp32, bf16, fp16, fp32-ieee (default: fp32,bf16)")
    ap.add_argument("--passes", default="fwd,bwd,fwdbwd-tuned",
                    help="comma-separated from fwd, bwd, fwdbwd, fwdbwd-tuned (default: "
                         "fwd,bwd,fwdbwd-tuned)")
    ap.add_argument("--impl", default="convt2d",
                    choices=["convt2d", "torch-as-both", "torch"],
                    help="what the 'convt2d' column runs; torch-as-both (alias torch) times "
                         "torch against itself, to test the harness")
    ap.add_argument("--outdir", default=".", help="where default outputs go (default: .)")
    ap.add_argument("--json", default=None, help="JSON path (default: OUTDIR/bench_results.json)")
    ap.add_argument("--md", default=None, help="markdown path (default: OUTDIR/bench_results.md)")
    ap.add_argument("--png", default=None, help="PNG path (default: OUTDIR/bench_results.png)")
    ap.add_argument("--no-png", action="store_true", help="skip the chart")
    ap.add_argument("--peak-tflops-bf16", type=float, default=None)
    ap.add_argument("--peak-tflops-fp16", type=float, default=None)
    ap.add_argument("--peak-tflops-tf32", type=float, default=None,
                    help="peak for the fp32 rows (TF32 on)")
    ap.add_argument("--peak-tflops-fp32", type=float, default=None,
                    help="FMA fp32 peak; the fp32-ieee rows use max(this, tf32 / 3, fp16 / 3) on CUDA")
    ap.add_argument("--bandwidth-tbs", type=float, default=None, help="memory bandwidth, TB/s")
    ap.add_argument("--no-measure-peaks", action="store_true",
                    help="don't measure; use flags or defaults (CUDA: bf16/fp16 800, tf32 400, "
                         "fp32 60 TFLOP/s, 3.0 TB/s)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="set torch.backends.cudnn.benchmark = True for every pass (default: "
                         "off, torch's default; the fwdbwd-tuned pass sets it for itself)")
    ap.add_argument("--sweep", type=int, default=0, metavar="N",
                    help="N seeded random layer configs (sweep_configs: batch 1-128, channels "
                         "1-1024, kernels 1-9 and 16, strides 1-4 and 8, groups and depthwise, "
                         "1x1 to 256x256, both layouts) instead of the suite")
    ap.add_argument("--models", action="store_true",
                    help="the layers of published models (MODELS, each with its source) "
                         "instead of the suite")
    ap.add_argument("--layer", action="append", default=[],
                    help='one layer instead of the suite: "N,Cin,Cout,k,H,W[,stride,padding,'
                         'output_padding,groups,dilation,bias,channels_last]" (repeatable)')
    ap.add_argument("--host", action="store_true",
                    help="also time tiny layers per call (host overhead: forward and forward + "
                         "backward), torch against convt2d")
    ap.add_argument("--e2e", action="store_true",
                    help="also time whole training steps (DCGAN and pix2pix generators, fp32 "
                         "and bf16 autocast, cudnn.benchmark off and on), CUDA only")
    ap.add_argument("--e2e-only", action="store_true", help="only the --e2e part")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--cpu-gflop", type=float, default=None,
                    help="CPU mode: forward GFLOP budget per row (default 0.3, --quick 0.12)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random inputs and of --sweep's configs")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of row errors")
    args = ap.parse_args(argv)
    if args.impl == "torch":
        args.impl = "torch-as-both"
    if args.cpu_gflop is None:
        args.cpu_gflop = 0.12 if args.quick else 0.3
    return args


def _split(s: str, valid: Sequence[str], what: str) -> List[str]:
    items = [t.strip() for t in s.split(",") if t.strip()]
    bad = [t for t in items if t not in valid]
    if bad:
        raise SystemExit(f"unknown {what}: {', '.join(bad)} (valid: {', '.join(valid)})")
    return items


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg_names = _split(args.configs, [c.name for c in SUITE], "config")
    dtype_names = _split(args.dtypes, list(DTYPES), "dtype")
    pass_names = _split(args.passes, list(PASSES), "pass")
    if args.e2e_only:
        configs, config_set = [], "none"
    elif args.layer:
        configs, config_set = [parse_layer(t) for t in args.layer], "--layer"
    elif args.sweep:
        configs, config_set = sweep_configs(args.sweep, args.seed), \
            f"a sweep of {args.sweep} random configs, seed {args.seed}"
    elif args.models:
        configs, config_set = list(MODELS), "the model zoo"
    else:
        configs, config_set = [c for c in SUITE if c.name in cfg_names], "the suite"

    if args.cpu:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        raise SystemExit("no CUDA device available; use --cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True

    impls = [TorchImpl()]
    if args.impl == "convt2d":
        try:
            impls.append(Convt2dImpl())
        except Exception as e:
            raise SystemExit(f"cannot import convt2d ({_short(e)}); build it, or use "
                             f"--impl torch-as-both to test the harness")
        if device == "cuda":
            try:
                if not impls[1].mod.cuda_available():
                    print("[bench] WARNING: this convt2d build has no CUDA kernels; convt2d "
                          "rows will error", file=sys.stderr)
            except Exception:
                pass
    else:
        impls.append(TorchImpl())

    timer, timer_desc = make_cuda_timer(args.quick) if device == "cuda" else make_cpu_timer(
        args.quick)
    env = environment(device, args)
    env["timer"] = timer_desc
    env["config_set"] = config_set
    if device == "cuda":
        l2 = env.get("l2_bytes") or 50 * 2 ** 20
    else:
        l2 = 0
    peaks, peak_src = resolve_peaks(args, device, timer, dtype_names)
    env["peaks"] = peaks
    env["peaks_source"] = peak_src
    env["peaks_line"] = peaks_line(peaks, peak_src)
    if device == "cuda":
        env["rotation"] = f"input sets rotated until total input bytes > 2 x L2 ({l2 / 2**20:.0f} MiB)"

    print(f"[bench] {env['device_name']} | torch {env['torch']} | cuDNN {env['cudnn']} | "
          f"CUDA {env['cuda']} | impl {args.impl}", file=sys.stderr)
    print(f"[bench] timing: {timer_desc}", file=sys.stderr)
    if device == "cpu" and (env.get("loadavg_1m") or 0) > 0.5 * (os.cpu_count() or 1):
        print(f"[bench] WARNING: load average {env['loadavg_1m']} on {os.cpu_count()} CPUs: "
              f"CPU timings will be noisy (multi-threaded torch suffers most; try --threads 1)",
              file=sys.stderr)
    print(f"[bench] peaks used: {env['peaks_line']}", file=sys.stderr)

    rows: List[Dict[str, Any]] = []
    total = len(configs) * len(dtype_names) * len(pass_names)
    i = 0
    t_start = time.time()
    for cfg0 in configs:
        cfg, note = (cpu_scale(cfg0, args.cpu_gflop) if device == "cpu" else (cfg0, "unscaled"))
        for d in dtype_names:
            for p in pass_names:
                i += 1
                t0 = time.time()
                try:
                    row = run_row(cfg, d, p, impls, timer, device, peaks, args, l2, note)
                except Exception as e:  # anything run_row itself didn't catch
                    row = {"config": cfg.name, "dtype": d, "pass": p, "shape": cfg.describe(),
                           "scaling": note, "flops": 0, "bytes": 0, "floor_ms": None,
                           "torch_ms": None, "convt2d_ms": None, "speedup": None, "err": None,
                           "torch_err": None, "pct_floor": None, "torch_pct_floor": None,
                           "error": "harness: " + _short(e), "torch_error": None, "n_sets": 0,
                           "convt2d_off_ms": None, "on_off": None, "err_off": None,
                           "error_off": None}
                rows.append(row)
                msg = (f"[{i}/{total}] {cfg.name:6s} {d:9s} {p:6s} torch {_fmt_ms(row['torch_ms'])} "
                       f"ms, {args.impl if args.impl != 'convt2d' else 'convt2d'} "
                       f"{_fmt_ms(row['convt2d_ms'])} ms, "
                       + (f"{row['speedup']:.2f}x" if row["speedup"] else "-")
                       + f", err {_fmt_err(row['err'])} (torch {_fmt_err(row['torch_err'])})"
                       + f", {time.time() - t0:.1f}s")
                if row["torch_error"]:
                    msg += f"\n      torch ERROR: {row['torch_error']}"
                if row["error"] and row["error"] != row["torch_error"]:
                    msg += f"\n      convt2d ERROR: {row['error']}"
                print(msg, file=sys.stderr, flush=True)
    e2e_rows: List[Dict[str, Any]] = []
    if (args.e2e or args.e2e_only) and device == "cuda" and args.impl == "convt2d":
        e2e_rows = run_e2e(timer, args)
    host_rows: List[Dict[str, Any]] = []
    if args.host and args.impl == "convt2d":
        host_rows = run_host_overhead(device, args)
    env["elapsed_s"] = round(time.time() - t_start, 1)

    gms = geomeans(rows)
    md = markdown(rows, env, gms, args.impl)
    dist = distribution(rows) if (args.sweep or args.models) else []
    classes = class_breakdown(rows) if dist else []
    if dist:
        md += "\n" + distribution_markdown(dist)
    if classes:
        md += "\n" + class_breakdown_markdown(classes)
    if e2e_rows:
        md += "\n" + e2e_markdown(e2e_rows)
    if host_rows:
        md += "\n" + host_markdown(host_rows)
    os.makedirs(args.outdir, exist_ok=True)
    json_path = args.json or os.path.join(args.outdir, "bench_results.json")
    md_path = args.md or os.path.join(args.outdir, "bench_results.md")
    png_path = args.png or os.path.join(args.outdir, "bench_results.png")
    for pth in (json_path, md_path) + (() if args.no_png else (png_path,)):
        d = os.path.dirname(os.path.abspath(pth))
        os.makedirs(d, exist_ok=True)
    with open(json_path, "w") as f:
        json.dump({"env": env, "rows": rows, "geomean": gms, "e2e": e2e_rows,
                   "distribution": dist, "classes": classes, "host": host_rows,
                   "args": {k: v for k, v in vars(args).items()}}, f, indent=1)
    with open(md_path, "w") as f:
        f.write(md)
    wrote = [json_path, md_path]
    if not args.no_png:
        try:
            draw = plot_distribution if dist else plot
            if rows and draw(rows, env, png_path):
                wrote.append(png_path)
        except Exception as e:
            print(f"[bench] WARNING: plotting failed ({_short(e)})", file=sys.stderr)

    print(md)
    print("Geometric-mean speedup per dtype x pass:")
    for g in gms:
        v = f"{g['geomean_speedup']:.3f}x" if g["geomean_speedup"] else "-"
        print(f"  {g['dtype']:9s} {g['pass']:6s} {v}  ({g['rows']}/{g['rows_total']} rows)")
    print(f"[bench] wrote {', '.join(wrote)} ({env['elapsed_s']}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
