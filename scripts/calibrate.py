"""Time every algorithm the planner could run, per pass, over a sweep of layers, and compare
with what the planner chooses (docs/design.md, "The planner").

    python scripts/calibrate.py --sweep 100 --seed 1 --dtypes fp32,bf16 --out calib.json

For each layer of `python -m convt2d.bench --sweep N --seed S` and each dtype: the forward
(fwd), grad_input (dgrad) and grad_weight (wgrad) are timed with each algorithm forced through
CONVT2D_ALGO (an algorithm that cannot take the layer is skipped: convt2d.last_algorithms()
shows the fallback), then with the planner's own choice, and torch's own op for the same pass
(`torch` in the output: F.conv_transpose2d, or aten.convolution_backward with one gradient).
Prints, per pass, how often the default is within 10% of the best candidate, and the layers
where it is furthest off; writes every time to --out (JSON). `--layer L` (repeatable, the
`python -m convt2d.bench --layer` form) replaces the sweep with the layers given; `--algos`
(pass:algo,...) times only the candidates named for the passes it names. Timing
(`--timer`): `events` (default), CUDA events around back-to-back calls, so host time counts
(small layers' times are the host's), 3 warm-up runs, then the median of enough runs for about
20 ms (at least 5); `bench`, the bench's own timer (triton's do_bench, median, with its L2 flush
between calls, which hides the host's time: GPU time, what the bench's tables report). The two
can rank small layers' candidates differently (a grad_weight kernel of two launches against one
of four: docs/perf-log.md, v37); a rule should hold under the one it is judged by. The
backward passes run with the strided problem (bwd:strided) and, for the default, as the planner
chooses.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import convt2d  # noqa: E402
from convt2d.bench import make_cuda_timer, parse_layer, sweep_configs  # noqa: E402

ALGOS = {
    "fwd": ["narrow_output", "direct_tensorop", "direct_simt", "patch_gemm", "depthwise", "implicit_gemm",
            "implicit_gemm_padded", "implicit_gemm_simt", "cublas_gemm", "gemm_col2im"],
    "dgrad": ["implicit_gemm", "implicit_gemm_simt", "direct", "implicit_gemm_padded", "depthwise", "depthwise_tiled",
              "cublas_gemm"],
    "wgrad": ["tensorop", "simt", "direct", "tensorop_padded", "wgmma_nchw", "depthwise", "depthwise_tiled",
              "cublas_gemm"],
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def time_ms(fn):
    """Median ms of fn: CUDA events around back-to-back calls (host time counts)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    reps = int(min(50, max(5, 20.0 / max(first, 1e-3))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in ev)
    return ts[len(ts) // 2]


TIMER = time_ms  # main() may replace it with the bench's do_bench timer (--timer bench)


def run_pass(pass_, cfg, x, w, b, gy, spec):
    if spec:
        os.environ["CONVT2D_ALGO"] = spec
    else:
        os.environ.pop("CONVT2D_ALGO", None)
    k = dict(stride=cfg.stride, padding=cfg.padding, output_padding=cfg.output_padding,
             groups=cfg.groups, dilation=cfg.dilation)
    args = [list(cfg.stride), list(cfg.padding), list(cfg.output_padding), cfg.groups,
            list(cfg.dilation)]
    if pass_ == "fwd":
        fn = lambda: convt2d.forward(x, w, b, **k)  # noqa: E731
    else:
        mask = [pass_ == "dgrad", pass_ == "wgrad", False]
        fn = lambda: torch.ops.convt2d.backward(gy, x, w, *args, mask)  # noqa: E731
    fn()
    ran = convt2d.last_algorithms().get(pass_)
    return TIMER(fn), ran


def run_torch(pass_, cfg, x, w, b, gy):
    """torch's own op for the pass (cuDNN), timed the same way."""
    k = (list(cfg.stride), list(cfg.padding), list(cfg.output_padding), cfg.groups,
         list(cfg.dilation))
    if pass_ == "fwd":
        return TIMER(lambda: torch.nn.functional.conv_transpose2d(x, w, b, *k))
    mask = [pass_ == "dgrad", pass_ == "wgrad", False]
    return TIMER(lambda: torch.ops.aten.convolution_backward(
        gy, x, w, None, k[0], k[1], k[4], True, k[2], k[3], mask))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--passes", default="fwd,dgrad,wgrad")
    ap.add_argument("--out", default="calib.json")
    ap.add_argument("--worst", type=int, default=12)
    ap.add_argument("--timer", choices=["events", "bench"], default="events",
                    help="events: back-to-back calls, host time counts; bench: the bench's "
                         "do_bench (L2 flushed between calls, GPU time)")
    ap.add_argument("--layer", action="append", default=[],
                    help="time these layers (bench --layer form) instead of the sweep")
    ap.add_argument("--algos", default="",
                    help="pass:algo,... : time only these candidates of the passes named "
                         "(e.g. dgrad:depthwise,dgrad:depthwise_tiled); other passes all")
    args = ap.parse_args()
    only = {}
    for item in filter(None, args.algos.split(",")):
        p, _, a = item.partition(":")
        if p not in ALGOS or a not in ALGOS[p]:
            raise SystemExit(f"--algos: {item!r} is not pass:algo (passes and algorithms: {ALGOS})")
        only.setdefault(p, []).append(a)
    global TIMER
    if args.timer == "bench":
        TIMER = make_cuda_timer(quick=True)[0]
    torch.backends.cudnn.benchmark = False
    out = []
    cfgs = ([parse_layer(t) for t in args.layer] if args.layer
            else sweep_configs(args.sweep, args.seed))
    for cfg in cfgs:
        for dn in args.dtypes.split(","):
            dt = DTYPES[dn]
            g = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(cfg.N, cfg.Cin, cfg.H, cfg.W, device="cuda", generator=g).to(dt)
            if cfg.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            w = torch.randn(cfg.Cin, cfg.Cout // cfg.groups, *cfg.k, device="cuda",
                            generator=g).to(dt)
            b = torch.randn(cfg.Cout, device="cuda", generator=g).to(dt) if cfg.bias else None
            y = convt2d.forward(x, w, b, cfg.stride, cfg.padding, cfg.output_padding,
                                cfg.groups, cfg.dilation)
            gy = torch.randn(y.shape, device="cuda", generator=g).to(dt).contiguous(
                memory_format=torch.channels_last if y.is_contiguous(
                    memory_format=torch.channels_last) and not y.is_contiguous()
                else torch.contiguous_format)
            for pass_ in args.passes.split(","):
                rec = {"config": cfg.name, "layer": cfg.layer_string(), "dtype": dn,
                       "pass": pass_, "times": {}}
                bwd = "" if pass_ == "fwd" else ",bwd:strided"
                for a in only.get(pass_, ALGOS[pass_]):
                    try:
                        t, ran = run_pass(pass_, cfg, x, w, b, gy, f"{pass_}:{a}{bwd}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {cfg.name} {dn} {pass_} {a}: {str(e).splitlines()[0]}")
                        continue
                    if ran == a:
                        rec["times"][a] = t
                t, ran = run_pass(pass_, cfg, x, w, b, gy, "")
                rec["default"] = {"ms": t, "algo": ran}
                rec["torch_ms"] = run_torch(pass_, cfg, x, w, b, gy)
                out.append(rec)
            torch.cuda.empty_cache()
        # (rewritten after every layer: a run cut short keeps what it timed)
        with open(args.out, "w") as f:
            json.dump({"env": {"device": torch.cuda.get_device_name(), "torch": torch.__version__},
                       "args": vars(args), "rows": out}, f, indent=1)
    os.environ.pop("CONVT2D_ALGO", None)
    for pass_ in args.passes.split(","):
        rs = [r for r in out if r["pass"] == pass_ and r["times"]]
        if not rs:
            continue
        ratio = [r["default"]["ms"] / min(r["times"].values()) for r in rs]
        within = sum(v <= 1.10 for v in ratio) / len(ratio)
        print(f"\n{pass_}: default within 10% of the best candidate on {100 * within:.0f}% of "
              f"{len(rs)}; geomean default/best {math.exp(sum(map(math.log, ratio)) / len(ratio)):.3f}")
        order = sorted(zip(ratio, rs), key=lambda t: -t[0])[:args.worst]
        for v, r in order:
            best = min(r["times"], key=r["times"].get)
            print(f"  {v:6.2f}x {r['dtype']} default {r['default']['algo']} "
                  f"{r['default']['ms']:.3f} ms, best {best} {r['times'][best]:.3f} ms, "
                  f"torch {r['torch_ms']:.3f} ms  "
                  f"--layer {r['layer']}  " +
                  " ".join(f"{a}={t:.3f}" for a, t in sorted(r["times"].items())))


if __name__ == "__main__":
    main()
