"""Quick GPU correctness sweep for the CUDA kernels (forward + all grads, every dtype).

Fresh random configs; reference = torch's conv_transpose2d in float64 on the CPU.
Prints one line per failure and a summary; exit code 1 on any failure.
"""
import random
import sys

import torch
import torch.nn.functional as F

import convt2d

TOL = {torch.float64: 1e-10, torch.float32: 1e-5, "tf32": 5e-3, torch.float16: 5e-3,
       torch.bfloat16: 3e-2}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def one(cfg, dtype, tf32, channels_last, seed):
    g = torch.Generator().manual_seed(seed)
    N, cig, cog, G, kh, kw, H, W, s, p, d, op, bias = cfg
    x = torch.randn(N, cig * G, H, W, generator=g, dtype=torch.float64)
    w = torch.randn(cig * G, cog, kh, kw, generator=g, dtype=torch.float64)
    b = torch.randn(cog * G, generator=g, dtype=torch.float64) if bias else None
    args = (s, p, op, G, d)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = b.clone().requires_grad_() if bias else None
    ref = F.conv_transpose2d(xr, wr, br, *args)
    go = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    refs = torch.autograd.grad(ref, [xr, wr] + ([br] if bias else []), go)
    dev = "cuda"
    xd = x.to(dev, dtype)
    if channels_last:
        xd = xd.to(memory_format=torch.channels_last)
    xd.requires_grad_()
    wd = w.to(dev, dtype).requires_grad_()
    bd = b.to(dev, dtype).requires_grad_() if bias else None
    # poison the caching allocator so unwritten outputs show up as NaN
    torch.empty(64 << 20, device=dev, dtype=torch.float32).fill_(float("nan"))
    with torch.backends.cudnn.flags(allow_tf32=tf32):
        out = convt2d.forward(xd, wd, bd, *args)
        grads = torch.autograd.grad(out, [xd, wd] + ([bd] if bias else []), go.to(dev, dtype))
    tol = TOL["tf32"] if (dtype == torch.float32 and tf32) else TOL[dtype]
    errs = [rel(out, ref)] + [rel(a, r) for a, r in zip(grads, refs)]
    bad = any(not (e <= tol) for e in errs)
    return bad, errs, tol


def main():
    rnd = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    fixed = [  # (N, cig, cog, G, kh, kw, H, W, stride, padding, dilation, output_padding, bias)
        (2, 64, 128, 1, 3, 5, 9, 17, (1, 1), (0, 0), (1, 1), (0, 0), False),
        (2, 32, 64, 1, 3, 3, 7, 9, (5, 5), (1, 1), (2, 2), (0, 0), False),
        (2, 8, 16, 4, 3, 5, 8, 9, (2, 3), (1, 2), (2, 1), (0, 0), False),
        (2, 256, 128, 1, 2, 2, 6, 5, (2, 2), (0, 0), (1, 1), (0, 0), True),
        (3, 256, 128, 1, 4, 4, 5, 4, (2, 2), (1, 1), (1, 1), (0, 0), False),
        (1, 512, 256, 1, 3, 3, 7, 8, (2, 2), (1, 1), (1, 1), (1, 1), False),
        (2, 40, 72, 1, 3, 3, 7, 9, (2, 2), (1, 1), (1, 1), (1, 1), True),
        (2, 3, 5, 1, 1, 1, 4, 4, (1, 1), (0, 0), (1, 1), (0, 0), True),
    ]
    cfgs = list(fixed)
    for _ in range(40):
        G = rnd.choice([1, 1, 2, 4])
        s = (rnd.randint(1, 3), rnd.randint(1, 3))
        d = (rnd.randint(1, 2), rnd.randint(1, 2))
        op = (rnd.randint(0, max(s[0], d[0]) - 1), rnd.randint(0, max(s[1], d[1]) - 1))
        k = (rnd.randint(1, 5), rnd.randint(1, 5))
        p = (rnd.randint(0, 2), rnd.randint(0, 2))
        H, W = rnd.randint(1, 12), rnd.randint(1, 12)
        Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (k[0] - 1) + op[0] + 1
        Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (k[1] - 1) + op[1] + 1
        if Ho <= 0 or Wo <= 0:
            continue
        cfgs.append((rnd.randint(1, 3), rnd.choice([1, 3, 8, 16, 33, 64]),
                     rnd.choice([1, 5, 16, 32, 48, 96]), G, k[0], k[1], H, W, s, p, d, op,
                     rnd.random() < 0.5))
    dts = [(torch.float32, True), (torch.float32, False), (torch.float16, False),
           (torch.bfloat16, False), (torch.float64, False)]
    n = fails = 0
    worst = {}
    for i, cfg in enumerate(cfgs):
        for dt, tf32 in dts:
            for cl in (False, True):
                n += 1
                key = f"{dt}{'-tf32' if tf32 else ''}"
                try:
                    bad, errs, tol = one(cfg, dt, tf32, cl, seed=1000 * i + n)
                except Exception as e:  # noqa: BLE001
                    bad, errs, tol = True, [repr(e)[:300]], None
                if isinstance(errs[0], float):
                    worst[key] = max(worst.get(key, 0.0), max(errs))
                if bad:
                    fails += 1
                    print(f"FAIL {cfg} {key} cl={cl} errs={errs} tol={tol}")
    print("max rel err per dtype:", {k: f"{v:.2e}" for k, v in worst.items()})
    print(f"gpu_check: {n - fails} passed, {fails} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
