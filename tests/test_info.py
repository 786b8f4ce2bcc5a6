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


def test_hopper_without_sm90a_warns_once(monkeypatch):
    """A Hopper GPU running a CUDA build without sm_90a gets one warning naming the fix; a
    build with it, or another GPU, gets none."""
    import warnings

    from convt2d import _build_check, _info

    def run(cap, wgmma):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
        monkeypatch.setattr(_build_check, "build_info", lambda: {
            "torch": torch.__version__, "torch_cuda": "13.0", "cuda_toolkit": "13.0",
            "arch_list": "8.0;8.6;8.9;9.0+PTX", "wgmma": wgmma})
        monkeypatch.setattr(_info, "_warned", [False])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            _info.warn_if_slow_build(torch.device("cuda", 0))
        assert _info._warned[0]
        return [str(x.message) for x in w]

    msgs = run((9, 0), False)
    assert len(msgs) == 1 and "sm_90a" in msgs[0] and "TORCH_CUDA_ARCH_LIST=9.0a" in msgs[0]
    assert run((9, 0), True) == []
    assert run((8, 0), False) == []
