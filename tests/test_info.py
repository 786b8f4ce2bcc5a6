"""convt2d.info(), python -m convt2d.info, and the autotune counters they report."""
import json
import subprocess
import sys

import torch

import convt2d


def test_info_dict():
    d = convt2d.info()
    for k in ("convt2d", "torch", "cuda", "cudnn", "cuda_kernels", "gpu", "cudnn_benchmark",
              "autotune"):
        assert k in d, k
    assert d["convt2d"] == convt2d.__version__ and d["torch"] == torch.__version__
    assert d["cuda_kernels"] == convt2d.cuda_available()
    a = d["autotune"]
    assert set(a) == {"tunings", "cache_hits", "cache_misses", "candidate_failures", "entries"}
    assert all(isinstance(v, int) and v >= 0 for v in a.values())
    assert isinstance(convt2d.tuning_log(), list)


def test_info_module_main_prints_json():
    r = subprocess.run([sys.executable, "-m", "convt2d.info"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["convt2d"] == convt2d.__version__
    assert "RuntimeWarning" not in r.stderr, r.stderr


def test_info_stays_callable_after_importing_the_module():
    r = subprocess.run([sys.executable, "-c",
                        "import convt2d.info, convt2d; print(convt2d.info()['convt2d'])"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == convt2d.__version__


def test_cpu_calls_never_tune():
    """The CPU backend has one kernel: with benchmark on, nothing is timed or cached."""
    convt2d.clear_tuning_cache()
    x = torch.randn(2, 4, 5, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, benchmark=True):
        for _ in range(2):
            y = convt2d.forward(x, w, None, 2, 1, 1, 1, 1)
            torch.autograd.grad(y.sum(), [x, w])
    a = convt2d.info()["autotune"]
    assert a["tunings"] == 0 and a["entries"] == 0 and a["cache_hits"] == 0
    assert a["cache_misses"] == 0
