"""Direct forward kernel: correctness sweep + large-index test + timing (one device call).

CONVT2D_KERNEL=direct routes every forward the direct kernel accepts to it.
Reference: torch's conv_transpose2d in float64 on the CPU. Outputs are poisoned
with NaN (the caching allocator hands the op a block we filled with NaN).
usage: python scripts/direct/check_bench.py [check] [big] [bench]
"""
import math
import os
import random
import sys
import time

os.environ["CONVT2D_KERNEL"] = "direct"
import torch
import torch.nn.functional as F

import convt2d

TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def poison(numel, dtype):
    t = torch.empty(numel, device="cuda", dtype=dtype)
    t.fill_(float("nan"))
    del t  # the next allocation of this size gets this block


def out_shape(cfg):
    N, cig, cog, G, kh, kw, H, W, s, p, d, op, bias = cfg
    Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    return N, cog * G, Ho, Wo


def one(cfg, dtype, layout, seed, names=None):
    g = torch.Generator().manual_seed(seed)
    N, cig, cog, G, kh, kw, H, W, s, p, d, op, bias = cfg
    x = torch.randn(N, cig * G, H, W + (3 if layout == "view" else 0), generator=g, dtype=torch.float64)
    w = torch.randn(cig * G, cog, kh, kw, generator=g, dtype=torch.float64)
    b = torch.randn(cog * G, generator=g, dtype=torch.float64) if bias else None
    xd = x.to("cuda", dtype)
    wd = w.to("cuda", dtype)
    if layout == "view":  # non-contiguous view (row pitch W+3)
        xd = xd[..., 1:W + 1]
        x = x[..., 1:W + 1]
    elif layout == "cl":
        xd = xd.to(memory_format=torch.channels_last)
    elif layout == "wcl":  # weight channels_last -> output channels_last, input NCHW
        wd = wd.to(memory_format=torch.channels_last)
    bd = b.to("cuda", dtype) if bias else None
    # reference on quantized operands
    ref = F.conv_transpose2d(xd.double().cpu(), wd.double().cpu(), None if b is None else bd.double().cpu(),
                             s, p, op, G, d)
    poison(math.prod(out_shape(cfg)), dtype)
    if names is not None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = convt2d.forward(xd, wd, bd, s, p, op, G, d)
            torch.cuda.synchronize()
        for e in prof.events():
            if "direct" in e.name or "igemm" in e.name.lower():
                names.add(e.name.split("(")[0][:60])
    else:
        out = convt2d.forward(xd, wd, bd, s, p, op, G, d)
    torch.cuda.synchronize()
    nan = torch.isnan(out).any().item()
    e = rel(out, ref)
    cl = out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    return (nan or not (e <= TOL[dtype])), e, nan, cl


def check():
    rnd = random.Random(1234)
    fixed = [  # (N, cig, cog, G, kh, kw, H, W, stride, padding, dilation, output_padding, bias)
        (2, 8, 16, 4, 3, 5, 9, 37, (2, 3), (1, 2), (2, 1), (0, 0), False),   # seedD-like
        (2, 32, 64, 1, 3, 3, 5, 41, (5, 5), (1, 1), (2, 2), (0, 0), True),   # seedC-like
        (1, 3, 5, 1, 2, 2, 4, 70, (2, 2), (0, 0), (1, 1), (1, 1), True),     # kC=8, sw even
        (2, 5, 3, 2, 3, 1, 6, 33, (1, 4), (1, 0), (1, 2), (0, 3), True),     # kC=4, sw=4
        (1, 4, 20, 1, 1, 3, 3, 5, (3, 40), (0, 1), (1, 1), (2, 0), True),    # sw=40: v1 fallback
        (1, 6, 17, 3, 4, 4, 7, 45, (3, 6), (2, 1), (1, 3), (2, 5), False),   # chunks 16+1, sw=6
        (3, 1, 1, 1, 1, 1, 9, 65, (1, 1), (0, 0), (1, 1), (0, 0), True),     # 1x1
        (2, 16, 24, 2, 5, 5, 11, 13, (1, 1), (4, 4), (1, 1), (0, 0), False), # dense stride 1
        (2, 8, 16, 4, 3, 5, 9, 37, (2, 3), (1, 2), (2, 1), (1, 0), True),    # seedD-like + bias: bias rows
        (1, 3, 6, 1, 2, 3, 3, 9, (20, 2), (0, 1), (1, 1), (5, 1), True),    # sh=20: v1 fallback
    ]
    cfgs = list(fixed)
    while len(cfgs) < 30:
        G = rnd.choice([1, 1, 2, 3, 4])
        s = (rnd.randint(1, 5), rnd.randint(1, 7))
        d = (rnd.randint(1, 3), rnd.randint(1, 3))
        op = (rnd.randint(0, max(s[0], d[0]) - 1), rnd.randint(0, max(s[1], d[1]) - 1))
        k = (rnd.randint(1, 5), rnd.randint(1, 5))
        p = (rnd.randint(0, d[0] * (k[0] - 1)), rnd.randint(0, d[1] * (k[1] - 1)))
        H, W = rnd.randint(1, 14), rnd.randint(1, 50)
        cfg = (rnd.randint(1, 3), rnd.choice([1, 2, 3, 5, 8, 11]), rnd.choice([1, 3, 4, 6, 8, 12, 16, 21, 40]),
               G, k[0], k[1], H, W, s, p, d, op, rnd.random() < 0.5)
        if min(out_shape(cfg)[2:]) <= 0:
            continue
        cfgs.append(cfg)
    fails, n, worst = 0, 0, {}
    names = set()
    t0 = time.time()
    for i, cfg in enumerate(cfgs):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for layout in ("nchw", "cl", "wcl", "view") if i < 10 or i % 3 == 0 else ("nchw", "cl"):
                bad, e, nan, cl = one(cfg, dtype, layout, 1000 * i + n, names if (i < 10 and layout == "nchw") else None)
                n += 1
                k = str(dtype).split(".")[1]
                worst[k] = max(worst.get(k, 0), e)
                if bad:
                    fails += 1
                    print(f"FAIL cfg={cfg} {dtype} {layout} rel={e:.3e} nan={nan} cl_out={cl}")
    print(f"check: {n} cases ({len(cfgs)} configs x dtypes x layouts), {fails} failures, "
          f"worst rel err {worst}, {time.time() - t0:.1f}s")
    print("kernels seen:", sorted(names))
    return fails == 0


def big():
    # > 2^31 output elements (bf16): N=130, 4->4 ch, g=2, 1024x1024 -> 2048x2048
    N, C, H = 130, 4, 1024
    dtype = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(N, C, H, H, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(C, 2, 3, 3, device="cuda", dtype=dtype, generator=g)
    args = ((2, 2), (1, 1), (1, 1), 2, (1, 1))
    numel = N * C * 2048 * 2048
    print(f"big: output {numel} elements ({numel / 2**31:.3f} x 2^31)")
    poison(numel, dtype)
    out = convt2d.forward(x, w, None, *args)
    torch.cuda.synchronize()
    nan = torch.isnan(out).any().item()
    errs = []
    for n in (0, 65, 129):
        ref = F.conv_transpose2d(x[n:n + 1].double().cpu(), w.double().cpu(), None, *args)
        errs.append(rel(out[n:n + 1], ref))
    ok = (not nan) and max(errs) < 2e-2
    print(f"big: nan={nan} rel errs n=0,65,129: {[f'{e:.2e}' for e in errs]} -> {'OK' if ok else 'FAIL'}")
    del out, x
    torch.cuda.empty_cache()
    return ok


SEEDS = {
    "seedD": dict(N=16, Cin=32, Cout=64, k=(3, 5), hw=(128, 256), s=(2, 3), p=(1, 2), d=(2, 1), g=4),
    "seedC": dict(N=16, Cin=32, Cout=64, k=(3, 3), hw=(64, 128), s=(5, 5), p=(1, 1), d=(2, 2), g=1),
}


def bench():
    from triton.testing import do_bench
    for name, c in SEEDS.items():
        for dtype in (torch.float32, torch.bfloat16):
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(c["N"], c["Cin"], *c["hw"], device="cuda", dtype=dtype, generator=gen)
            w = torch.randn(c["Cin"], c["Cout"] // c["g"], *c["k"], device="cuda", dtype=dtype, generator=gen)
            args = (c["s"], c["p"], (0, 0), c["g"], c["d"])
            ft = lambda: F.conv_transpose2d(x, w, None, *args)
            fc = lambda: convt2d.forward(x, w, None, *args)
            out = fc()
            ref = F.conv_transpose2d(x.double(), w.double(), None, *args)
            err = rel(out, ref)
            obytes = out.numel() * out.element_size()
            del ref
            res = {}
            res["torch"] = do_bench(ft, warmup=25, rep=200, return_mode="median")
            res["convt2d"] = do_bench(fc, warmup=25, rep=200, return_mode="median")
            dn = str(dtype).split(".")[1]
            line = " ".join(f"{k}={v:.3f}ms" for k, v in res.items())
            print(f"bench {name} {dn}: {line} | rel_err={err:.2e} write floor="
                  f"{obytes / 3.0e12 * 1e3:.3f}ms eff BW={obytes / res['convt2d'] / 1e9:.2f}TB/s")


if __name__ == "__main__":
    steps = sys.argv[1:] or ["check", "big", "bench"]
    print(torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name())
    ok = True
    for st in steps:
        if st == "check":
            ok &= check()
        elif st == "big":
            ok &= big()
        elif st == "bench":
            bench()
    print("ALL OK" if ok else "SOME FAILURES")
