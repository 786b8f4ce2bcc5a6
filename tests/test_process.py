"""Whole processes: a mixed CPU + CUDA workload exits cleanly (exit code 0, nothing printed by
std::terminate) in many fresh interpreters, and a mismatched install fails at import with a
clear ImportError."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import convt2d
from convt2d import _build_check

# Forward, all three gradients, autotune off and on, several dtypes, channels-last, a CUDA
# graph, on CPU and (when present) CUDA; then the interpreter exits normally.
WORKLOAD = r'''
import torch, convt2d
torch.manual_seed(int(__import__("sys").argv[1]))
devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() and convt2d.cuda_available() else [])
for dev in devs:
    dtypes = [torch.float32, torch.float64] + ([torch.bfloat16, torch.float16] if dev == "cuda" else [])
    for bench in (False, True):
        torch.backends.cudnn.benchmark = bench
        for dt in dtypes:
            for cin, cout, k, s, g, hw in ((16, 32, 4, 2, 1, 9), (64, 64, 3, 1, 1, 12),
                                           (8, 8, 3, 2, 8, 7), (32, 3, 4, 2, 1, 10)):
                x = torch.randn(2, cin, hw, hw + 1, device=dev, dtype=dt, requires_grad=True)
                if s == 1:
                    x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
                w = torch.randn(cin, cout // g, k, k, device=dev, dtype=dt, requires_grad=True)
                b = torch.randn(cout, device=dev, dtype=dt, requires_grad=True)
                y = convt2d.forward(x, w, b, s, 1, 0, g, 1)
                torch.autograd.grad(y.float().square().sum(), [x, w, b])
    if dev == "cuda":
        x = torch.randn(2, 16, 8, 8, device=dev)
        w = torch.randn(16, 8, 4, 4, device=dev)
        convt2d.forward(x, w, None, 2, 1, 0, 1, 1)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = convt2d.forward(x, w, None, 2, 1, 0, 1, 1)
        g.replay()
        torch.cuda.synchronize()
print("WORKLOAD_DONE", convt2d.info()["autotune"]["tunings"])
'''

N_PROCESSES = 20


def _run_one(i):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, "-c", WORKLOAD, str(i)], capture_output=True,
                          text=True, timeout=600, env=env)


def test_clean_exit_in_fresh_processes():
    workers = 4 if torch.cuda.is_available() else 2
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(_run_one, range(N_PROCESSES)))
    bad = [(i, r.returncode, r.stderr[-2000:]) for i, r in enumerate(results)
           if r.returncode != 0 or "WORKLOAD_DONE" not in r.stdout or "terminate called" in r.stderr]
    assert not bad, f"{len(bad)} of {N_PROCESSES} processes did not exit cleanly: {bad[:3]}"


def _import_with(patch: str):
    code = f"import torch\n{patch}\nimport convt2d\nprint('IMPORTED')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(_build_check.build_info() is None, reason="this build wrote no build info")
def test_import_under_another_torch_minor_names_both_versions():
    r = _import_with("torch.__version__ = '2.99.0+cu999'")
    assert r.returncode != 0 and "IMPORTED" not in r.stdout
    err = r.stderr
    assert "ImportError" in err and "2.99.0" in err, err[-2000:]
    assert _build_check.build_info()["torch"] in err, err[-2000:]
    assert "--no-build-isolation" in err, err[-2000:]


@pytest.mark.skipif(not (_build_check.build_info() or {}).get("cuda_toolkit"),
                    reason="a CPU-only build imports under any torch")
def test_cuda_build_under_cpu_only_torch():
    r = _import_with("torch.version.cuda = None")
    assert r.returncode != 0 and "IMPORTED" not in r.stdout
    assert "ImportError" in r.stderr and "CPU-only" in r.stderr, r.stderr[-2000:]


def test_load_error_message_names_versions_and_fix():
    e = _build_check.load_error(OSError("undefined symbol: _ZN3c104impl"),
                                {"torch": "2.11.0+cu130"})
    msg = str(e)
    assert isinstance(e, ImportError)
    assert "2.11.0+cu130" in msg and torch.__version__ in msg and "undefined symbol" in msg
    assert "--no-build-isolation" in msg


def test_runs_on():
    from convt2d._info import runs_on

    wheel = "8.0;8.6;8.9;9.0a;10.0;12.0+PTX"
    assert runs_on(wheel, (9, 0)) == "sm_90a"
    assert runs_on(wheel, (8, 6)) == "sm_86"
    assert runs_on(wheel, (8, 7)) == "sm_86"
    assert runs_on(wheel, (12, 1)) == "sm_120"
    assert runs_on("8.0;8.6;8.9+PTX;9.0a", (10, 0)) == "PTX compute_89"
    assert runs_on("9.0a", (8, 0)) is None
    assert runs_on("9.0", (9, 0)) == "sm_90"


def test_build_records_what_it_is():
    info = convt2d.info()
    b = _build_check.build_info()
    if b is None:
        pytest.skip("this build wrote no build info")
    assert info["built_against_torch"] == b["torch"]
    if convt2d.cuda_available():
        assert b["cuda_toolkit"] and b["arch_list"]
        if torch.cuda.is_available():
            assert info["gpu_code"], info
            if torch.cuda.get_device_capability() == (9, 0) and b["wgmma"]:
                assert any("wgmma" in f for f in info["kernel_families"]), info


# pthread_create interposed (LD_PRELOAD): after `convt2d_test_allow_threads` more thread
# creations, every further one fails with EAGAIN, as under a thread or memory limit.
_PTHREAD_SHIM = r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
int convt2d_test_allow_threads = -1; /* creations still allowed; -1: no limit */
typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*f)(void*), void* arg) {
  static create_fn real;
  if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
  if (convt2d_test_allow_threads == 0) return EAGAIN;
  if (convt2d_test_allow_threads > 0) --convt2d_test_allow_threads;
  return real(t, a, f, arg);
}
'''

_THREAD_LIMIT_WORKLOAD = r'''
import ctypes, sys, torch, convt2d
torch.manual_seed(0)
torch.set_num_threads(4)
x = torch.randn(8, 64, 32, 32, dtype=torch.float64, requires_grad=True)
w = torch.randn(64, 16, 3, 3, dtype=torch.float64, requires_grad=True)
ref = torch.nn.functional.conv_transpose2d(x, w, None, 2, 1)
gref = torch.autograd.grad(ref.square().sum(), [x, w])
# From here one more thread can start, then none.
ctypes.c_int.in_dll(ctypes.CDLL(sys.argv[1]), "convt2d_test_allow_threads").value = 1
y = convt2d.forward(x, w, None, 2, 1, 0, 1, 1)
g = torch.autograd.grad(y.square().sum(), [x, w])
err = max([((y - ref).norm() / ref.norm()).item()] +
          [((a - b).norm() / b.norm()).item() for a, b in zip(g, gref)])
print("THREAD_LIMIT_DONE", err)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD interposition")
def test_cpu_kernels_survive_thread_creation_failure(tmp_path):
    """The CPU kernels start their own threads. When a thread cannot be started (a thread or
    memory limit) after others have, the work runs on the calling thread and the result is
    right. Before, the unwinding destroyed the started, still joinable std::thread objects and
    std::terminate aborted the process ("terminate called without an active exception")."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "shim.c"
    src.write_text(_PTHREAD_SHIM)
    lib = tmp_path / "shim.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib))
    r = subprocess.run([sys.executable, "-c", _THREAD_LIMIT_WORKLOAD, str(lib)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "terminate called" not in r.stderr, (r.returncode,
                                                                      r.stderr[-2000:])
    err = float(r.stdout.split("THREAD_LIMIT_DONE")[1].split()[0])
    assert err < 1e-12, err
