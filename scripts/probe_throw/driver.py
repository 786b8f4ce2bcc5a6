"""Run every throw case in its own `python -X faulthandler -c ...` subprocess (in parallel),
classify how each one ended, print a summary table, and dig into the first crash
(native backtrace via an LD_PRELOAD shim, LD_DEBUG symbol bindings, gdb/cuda-gdb).

usage: python driver.py --builds DIR --repo ROOT --log FILE [--jobs N] [--deadline EPOCH]
                        [--shim segv_bt.so] [--variants name:kind,...]
"""
import argparse
import concurrent.futures as cf
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

PY = sys.executable
EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"

TEMPLATE = r"""
import sys, os
sys.path[:0] = {paths!r}
import torch
{imports}
{setup}
try:
{call}
    print("PROBE_RESULT: NO_EXCEPTION", flush=True)
except BaseException as e:
    msg = str(e).strip().splitlines()
    print("PROBE_RESULT: RAISED", type(e).__name__, "|", (msg[0] if msg else "")[:200], flush=True)
"""


def indent(code):
    return "\n".join("    " + l for l in code.strip().splitlines())


class Case:
    def __init__(self, cid, code, expect=("RuntimeError",), env=None, note=""):
        self.cid, self.code, self.expect, self.env, self.note = cid, code, expect, env or {}, note
        self.rc = None
        self.out = ""
        self.result = "SKIP"
        self.detail = ""
        self.secs = 0.0


def make_code(paths, imports, setup, call):
    return TEMPLATE.format(paths=paths, imports=imports, setup=setup, call=indent(call))


def find_module(builds, name):
    d = os.path.join(builds, name)
    hits = glob.glob(os.path.join(d, name + EXT)) + glob.glob(os.path.join(d, name + ".so"))
    return (d, hits[0]) if hits else (d, None)


def build_cases(a, cuda):
    cases = []
    # -- baseline: errors raised by torch itself (no extension of ours involved)
    base = [
        ("base.torch_add_cpu", "torch.ones(2) + torch.ones(3)", ""),
        ("base.torch_convT_cpu",
         "torch.nn.functional.conv_transpose2d(torch.randn(1,3,4,4), torch.randn(4,2,3,3))", ""),
        ("base.torch_view_cpu", "torch.ones(6).view(4, -1)", ""),
    ]
    if cuda:
        base.append(("base.torch_add_cuda",
                     "torch.ones(2, device='cuda') + torch.ones(3, device='cuda')", ""))
    for cid, call, setup in base:
        cases.append(Case(cid, make_code([], "", setup, call)))

    # -- minimal probe modules
    for spec in a.variants.split(","):
        name, kind = spec.split(":")
        d, so = find_module(a.builds, name)
        if not so:
            c = Case(f"{name}.*", "")
            c.result, c.detail = "NOT BUILT", f"no {name}{EXT} in {d} (see probe_builds.log)"
            cases.append(c)
            continue
        imp = f"import {name}\nops = torch.ops.{name}"
        pre = "x = torch.randn(2, 3)\nassert torch.equal(ops.ok_op(x), x)"
        full = kind in ("bare", "pybind", "barecu") and name.endswith("_def")
        ops = [("throw_check", ("RuntimeError",)), ("throw_value", ("ValueError",)),
               ("throw_fmt", ("RuntimeError",))]
        if full:
            ops += [("throw_notimpl", ("NotImplementedError",)), ("throw_std", ("RuntimeError",))]
        for op, exp in ops:
            cases.append(Case(f"{name}.{op}", make_code([d], imp, pre, f"ops.{op}(x)"), exp))
        if full:
            cases.append(Case(f"{name}.throw_check_autograd",
                              make_code([d], imp, pre + "\nx.requires_grad_()",
                                        "ops.throw_check(x)")))
            cases.append(Case(f"{name}.throw_check_inference_mode",
                              make_code([d], imp, pre,
                                        "with torch.inference_mode():\n    ops.throw_check(x)")))
        if kind == "pybind":
            for f, exp in [("py_throw_check", ("RuntimeError",)),
                           ("py_throw_value", ("ValueError", "RuntimeError")),
                           ("py_throw_std", ("RuntimeError",))]:
                cases.append(Case(f"{name}.{f}", make_code([d], f"import {name}", "",
                                                           f"{name}.{f}()"), exp))
        if kind == "barecu" and cuda:
            pre_cu = ("x = torch.randn(2, 3, device='cuda')\n"
                      "y = ops.ok_op(x); torch.cuda.synchronize()\n"
                      "assert bool((y == 1).all()), 'kernel did not run'")
            for op, exp in [("throw_check", ("RuntimeError",)), ("throw_value", ("ValueError",))]:
                cases.append(Case(f"{name}.{op}_cuda", make_code([d], imp, pre_cu, f"ops.{op}(x)"),
                                  exp))
            cases.append(Case(f"{name}.throw_check_cpu_after_cuda_init",
                              make_code([d], imp, pre_cu + "\nx = x.cpu()", "ops.throw_check(x)")))

    if os.environ.get("PROBE_SELFTEST") == "1":  # check the crash handling of this script
        cases.append(Case("selftest.segv", make_code([], "import ctypes", "",
                                                      "ctypes.string_at(0)")))
        cases.append(Case("selftest.abort", make_code([], "", "", "os.abort()")))

    # -- the real module (built by setup.py before the probe)
    pydir = os.path.join(a.repo, "python")
    so = glob.glob(os.path.join(pydir, "convt2d", "_C" + EXT))
    others = glob.glob(os.path.join(pydir, "convt2d", "_C*.so"))
    if not so:
        c = Case("main.*", "")
        c.result = "NOT BUILT"
        c.detail = (f"no python/convt2d/_C{EXT} (found: {[os.path.basename(o) for o in others]})")
        cases.append(c)
        return cases
    imp = "import convt2d"
    cin = ("x = torch.randn(1, 3, 4, 4{dev}); w = torch.randn(4, 2, 3, 3{dev})\n"
           "args = (None, [1, 1], [0, 0], [0, 0], 1, [1, 1])")
    cpu = cin.format(dev="")
    call = "torch.ops.convt2d.forward(x, w, *args)"
    main = [
        ("main.ops_forward_cpu_cin_mismatch", cpu, call, {}),
        ("main.ops_forward_cpu_stacktraces_on", cpu, call, {"TORCH_SHOW_CPP_STACKTRACES": "1"}),
        ("main.functional_cpu", cpu, "convt2d.conv_transpose2d(x, w)", {}),
        ("main.autograd_cpu", cpu + "\nx.requires_grad_(); w.requires_grad_()",
         "convt2d.conv_transpose2d(x, w)", {}),
        ("main.inference_mode_cpu", cpu,
         "with torch.inference_mode():\n    convt2d.conv_transpose2d(x, w)", {}),
        ("main.ops_backward_cpu_bad_grad",
         "x = torch.randn(1, 4, 4, 4); w = torch.randn(4, 2, 3, 3); g = torch.randn(1, 7, 6, 6)",
         "torch.ops.convt2d.backward(g, x, w, [1, 1], [0, 0], [0, 0], 1, [1, 1], "
         "[True, True, False])", {}),
        ("main.ops_forward_cpu_bad_stride", "x = torch.randn(1, 4, 4, 4); w = torch.randn(4, 2, 3, 3)",
         "torch.ops.convt2d.forward(x, w, None, [0, 1], [0, 0], [0, 0], 1, [1, 1])", {}),
    ]
    if cuda:
        main += [
            ("main.ops_forward_cpu_after_cuda_init", cpu + "\ntorch.ones(1, device='cuda') + 1",
             call, {}),
            ("main.ops_forward_cuda_cin_mismatch", cin.format(dev=", device='cuda'"), call, {}),
            ("main.autograd_cuda", cin.format(dev=", device='cuda'") +
             "\nx.requires_grad_(); w.requires_grad_()", "convt2d.conv_transpose2d(x, w)", {}),
        ]
    for cid, setup, c, env in main:
        cases.append(Case(cid, make_code([pydir], imp, setup, c), env=env))
    cases.append(Case("main.ops_forward_cpu_int_dtype",
                      make_code([pydir], imp, "x = torch.ones(1, 4, 4, 4, dtype=torch.int32); "
                                "w = torch.ones(4, 2, 3, 3, dtype=torch.int32)",
                                "torch.ops.convt2d.forward(x, w, None, [1, 1], [0, 0], [0, 0], 1, [1, 1])"),
                      expect=("NotImplementedError",)))
    return cases


def classify(c):
    m = re.search(r"PROBE_RESULT: (RAISED (\w+) \| (.*)|NO_EXCEPTION)", c.out)
    term = re.search(r"terminate called[^\n]*", c.out)
    if c.rc == "timeout":
        c.result = "TIMEOUT"
    elif m and m.group(1) == "NO_EXCEPTION" and c.rc == 0:
        c.result = "NO EXCEPTION"
    elif m and m.group(2):
        etype = m.group(2)
        c.result = "ok" if etype in c.expect else f"WRONG TYPE"
        c.detail = f"{etype}: {m.group(3)[:110]}"
    elif c.rc in (-11, 139):
        c.result = "SIGSEGV"
    elif c.rc in (-6, 134):
        c.result = "SIGABRT"
    elif isinstance(c.rc, int) and (c.rc < 0 or c.rc > 128):
        c.result = f"SIGNAL {-c.rc if c.rc < 0 else c.rc - 128}"
    elif term:
        c.result = f"TERMINATE {c.rc}"
    elif "Traceback (most recent call last)" in c.out:
        c.result = f"PY ERROR {c.rc}"  # e.g. ImportError before the call: not a crash
    else:
        c.result = f"EXIT {c.rc}"
    if c.result not in ("ok",) and not c.detail:
        keys = re.findall(r"terminate called[^\n]*|what\(\):[^\n]*|Fatal Python error:[^\n]*|"
                          r"\w*Error: [^\n]*", c.out)
        tail = [l for l in c.out.strip().splitlines() if l.strip()][-1:]
        c.detail = (" | ".join(dict.fromkeys(keys)) if keys else (tail[0] if tail else ""))[:160]


def run_case(c, timeout):
    env = dict(os.environ)
    env.update(c.env)
    env["PYTHONUNBUFFERED"] = "1"
    t = time.time()
    try:
        r = subprocess.run([PY, "-X", "faulthandler", "-c", c.code], capture_output=True,
                           text=True, timeout=timeout, env=env)
        c.rc, c.out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        c.rc = "timeout"
        c.out = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                 else (e.stdout or "")) + ((e.stderr or b"").decode(errors="replace")
                                           if isinstance(e.stderr, bytes) else (e.stderr or ""))
    c.secs = time.time() - t
    classify(c)
    return c


def investigate(c, a, log, say):
    """Native-level look at one crashing case; everything in parallel."""
    work = os.path.join(a.builds, "investigate")
    os.makedirs(work, exist_ok=True)
    jobs = {}

    def run(tag, cmd, env, timeout):
        t = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            return tag, r.returncode, r.stdout + r.stderr, time.time() - t
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return tag, "timeout", out + err, time.time() - t

    base_env = dict(os.environ)
    base_env.update(c.env)
    base_env["PYTHONUNBUFFERED"] = "1"
    with cf.ThreadPoolExecutor(3) as ex:
        if a.shim and os.path.exists(a.shim):
            env = dict(base_env, LD_PRELOAD=a.shim)
            jobs["preload"] = ex.submit(run, "segv_bt preload", [PY, "-c", c.code], env, 90)
        ldd_prefix = os.path.join(work, "lddebug")
        for f in glob.glob(ldd_prefix + "*"):
            os.remove(f)
        env = dict(base_env, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=ldd_prefix)
        jobs["lddebug"] = ex.submit(run, "LD_DEBUG=bindings", [PY, "-c", c.code], env, 120)
        cuda_home = os.environ.get("CUDA_HOME", "")
        gdb = (shutil.which("gdb") or shutil.which("cuda-gdb")
               or next(iter(glob.glob(os.path.join(cuda_home, "bin", "cuda-gdb")) if cuda_home
                            else []), None)
               or next(iter(glob.glob("/usr/local/cuda*/bin/cuda-gdb")), None))
        left = (a.deadline - time.time()) if a.deadline else 150
        if gdb and left > 40:
            cmd = [gdb, "-q", "-nx", "-batch", "-ex", "set pagination off",
                   "-ex", "set print thread-events off", "-ex", "run", "-ex", "bt 40",
                   "-ex", "info registers rip", "-ex", "x/3i $pc",
                   "--args", PY, "-c", c.code]
            jobs["gdb"] = ex.submit(run, os.path.basename(gdb), cmd, base_env,
                                    int(min(120, left - 10)))
        else:
            say(f"  (no gdb/cuda-gdb run: gdb={gdb}, seconds left={left:.0f})")
        results = {k: f.result() for k, f in jobs.items()}

    if "preload" in results:
        tag, rc, out, secs = results["preload"]
        say(f"\n  [{tag}] rc={rc} ({secs:.0f}s); output around the signal (full in log):")
        lines = out.strip().splitlines()
        start = next((i for i, l in enumerate(lines) if "[segv_bt]" in l), max(0, len(lines) - 40))
        for i, l in enumerate(lines[max(0, start - 12):start + 60]):
            (say if i < 40 else log)("    " + l[:220])
    if "lddebug" in results:
        tag, rc, out, secs = results["lddebug"]
        say(f"\n  [{tag}] rc={rc} ({secs:.0f}s): bindings of C++ EH/unwinder symbols")
        pat = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'")
        eh_fn = re.compile(r"__cxa_(throw|begin_catch|end_catch|rethrow|allocate_exception|"
                           r"free_exception|get_globals|current_exception_type|call_terminate|"
                           r"get_exception_ptr)|_Unwind_|__gxx_personality|_ZSt9terminate")
        want = re.compile(eh_fn.pattern + r"|_ZTIN3c10(5Error|10ValueError|19NotImplementedError)E|"
                          r"torchCheckFail|_ZN3c105ErrorC|_ZN3c1010ValueErrorC")
        ours = re.compile(r"^_C\.|^(pybind|bare|barecu)_\w+\.")
        torch_libs = re.compile(r"^libc10\.so|^libtorch_python|^libtorch_cpu|^libtorch\.so")
        seen = {}
        for f in glob.glob(ldd_prefix + "*"):
            with open(f, errors="replace") as fh:
                for line in fh:
                    if "binding file" not in line:
                        continue
                    m = pat.search(line)
                    if m and want.search(m.group(3)):
                        key = (os.path.basename(m.group(1)), os.path.basename(m.group(2)), m.group(3))
                        seen[key] = seen.get(key, 0) + 1
            os.remove(f)
        odd = [k for k in sorted(seen)
               if re.search(r"__cxa_|_Unwind_|__gxx_personality|_ZSt9terminate", k[2])
               and not re.search(r"libstdc\+\+|libgcc_s", k[1])]
        interesting = sorted(k for k in seen if ours.search(k[0]) or (
            torch_libs.search(k[0]) and eh_fn.search(k[2]))) + odd
        for i, k in enumerate(interesting[:80]):
            (say if i < 25 else log)(f"    {k[0]} -> {k[1]}: {k[2]}")
        if len(interesting) > 80:
            log(f"    ... {len(interesting) - 80} more")
        say(f"  SUMMARY EH symbols bound outside libstdc++/libgcc_s: {odd if odd else 'none'}")
    if "gdb" in results:
        tag, rc, out, secs = results["gdb"]
        say(f"\n  [{tag}] rc={rc} ({secs:.0f}s); output from the signal on (full in log):")
        lines = out.strip().splitlines()
        start = next((i for i, l in enumerate(lines) if "received signal" in l or "SIGSEGV" in l
                      or "SIGABRT" in l), max(0, len(lines) - 50))
        for i, l in enumerate(lines[start:start + 60]):
            (say if i < 30 else log)("    " + l[:220])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--deadline", type=float, default=0)
    ap.add_argument("--shim", default="")
    ap.add_argument("--variants", required=True)
    ap.add_argument("--case-timeout", type=int, default=90)
    a = ap.parse_args()

    logf = open(a.log, "a")

    def log(s=""):  # detail: log file only
        logf.write(s + "\n")
        logf.flush()

    def say(s=""):  # summary: stdout and log
        print(s, flush=True)
        log(s)

    try:
        import torch  # only to know whether CUDA cases make sense
        cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        cuda = False
    cases = build_cases(a, cuda)
    todo = [c for c in cases if c.code]
    t0 = time.time()
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(lambda c: run_case(c, a.case_timeout), todo))
    say(f"\n===== CASES ({len(todo)} run, {a.jobs} at a time, {time.time() - t0:.0f}s; "
        f"cuda cases: {cuda}) =====")
    w = max(len(c.cid) for c in cases)
    for c in cases:
        say(f"{c.cid:<{w}}  {c.result:<12} {c.secs:4.1f}s  {c.detail[:90]}")
        log("    --- output tail ---")
        for l in c.out.strip().splitlines()[-25:]:
            log("    | " + l[:400])
    bad = [c for c in todo if c.result not in ("ok",)]
    crashed = [c for c in todo if c.result.startswith(("SIG", "EXIT", "TIMEOUT", "TERMINATE"))]
    groups = {}
    for c in todo:
        g = c.cid.split(".")[0]
        groups.setdefault(g, []).append(c.result == "ok")
    say("\nPER GROUP (ok/run): " + ", ".join(f"{g} {sum(v)}/{len(v)}" for g, v in groups.items()))
    say(f"NOT OK: {len(bad)} of {len(todo)}; crashed: {[c.cid for c in crashed]}")

    forced = os.environ.get("PROBE_INVESTIGATE")  # look at a case even if it raised fine
    if forced and not crashed:
        crashed = [c for c in todo if c.cid == forced]
    if crashed:
        order = ["main.ops_forward_cpu_cin_mismatch", "bare_def.throw_check",
                 "barecu_def.throw_check", "pybind_def.throw_check", "selftest.segv"]
        pick = next((c for o in order for c in crashed if c.cid == o), crashed[0])
        say(f"\n===== INVESTIGATING {pick.cid} ({pick.result}) =====")
        log("  case code:\n" + "\n".join("    " + l for l in pick.code.strip().splitlines()))
        investigate(pick, a, log, say)
        # a second, different group (a minimal module) if the first was the main module
        other = [c for c in crashed if c.cid.split(".")[0] != pick.cid.split(".")[0]]
        if other and (not a.deadline or a.deadline - time.time() > 60):
            say(f"\n===== INVESTIGATING {other[0].cid} ({other[0].result}) (no gdb) =====")
            a2 = argparse.Namespace(**vars(a))
            a2.deadline = time.time() + 1  # skip gdb the second time
            investigate(other[0], a2, log, say)


if __name__ == "__main__":
    main()
