"""What this convt2d install is, and what it has tuned.

    python -m convt2d.info          # prints it
    convt2d.info()                  # the same as a dict

``autotune`` counts the work of ``torch.backends.cudnn.benchmark = True``: ``tunings`` is the
number of problems timed (once per problem per process, unless two threads tune one problem
at the same time or the cache is cleared), ``cache_hits`` the calls that reused a cached
choice, ``cache_misses`` the calls that found none (each then tunes, except inside a CUDA graph
capture), ``candidate_failures`` the candidates skipped while tuning;
``convt2d.tuning_log()`` lists every tuned problem with each candidate's time, or why it was
skipped, and the choice.
"""
import json
import warnings
from typing import Any, Dict, List, Optional

import torch


def tuning_log() -> List[Dict[str, Any]]:
    """One dict per tuned problem: ``key``, ``chosen`` and ``candidates`` (``name``, ``ms``:
    the median time, None if skipped, ``skipped``: why)."""
    from . import _C

    return _C._tuning_log()


def clear_tuning_cache() -> None:
    """Forget every autotuned choice and zero the counters: the next call of each problem
    under ``torch.backends.cudnn.benchmark = True`` times its candidates again."""
    from . import _C

    _C._tuning_reset()


def last_algorithms() -> Dict[str, str]:
    """The algorithm the planner ran for each pass in the process's latest call of it:
    ``{"fwd": ..., "dgrad": ..., "wgrad": ..., "bwd": ...}`` (CUDA; a pass that has not run
    is absent; a call that skips a pass leaves its entry as it was). Names as ``CONVT2D_ALGO``
    takes them (docs/design.md, "Forcing an algorithm"); for tests and for checking what a
    forced choice did. It is the planner's choice: where a launcher then declines (alignment,
    grid limits) and a fallback kernel runs, the entry still names the planned algorithm."""
    from . import _C

    return dict(_C._last_algorithms())


def _targets(arch_list: str):
    """[(major, minor, arch_specific, ptx)] of a TORCH_CUDA_ARCH_LIST string."""
    out = []
    for a in arch_list.replace(" ", ";").split(";"):
        a = a.strip()
        if not a:
            continue
        ptx = a.endswith("+PTX")
        a = a[:-4] if ptx else a
        spec = a.endswith("a")  # arch-specific (sm_90a); "f" (family) code runs as plain
        a = a.rstrip("af")
        try:
            major, minor = (int(v) for v in a.split(".")[:2])
        except ValueError:
            continue
        out.append((major, minor, spec, ptx))
    return out


def runs_on(arch_list: str, cap) -> Optional[str]:
    """How a build for arch_list runs on a GPU of compute capability cap: "sm_XY" (its
    machine code), "PTX compute_XY" (compiled by the driver at first use), or None."""
    best = None
    for major, minor, spec, _ in _targets(arch_list):
        # machine code runs on the same major and an equal or newer minor; sm_90a only on 9.0
        if major == cap[0] and minor <= cap[1] and (not spec or minor == cap[1]):
            if best is None or minor > best[1] or (minor == best[1] and spec):
                best = (major, minor, spec)
    if best:
        return f"sm_{best[0]}{best[1]}{'a' if best[2] else ''}"
    ptx = [(m, n) for m, n, spec, p in _targets(arch_list) if p and not spec and (m, n) <= cap]
    return f"PTX compute_{max(ptx)[0]}{max(ptx)[1]}" if ptx else None


def kernel_families(cap, wgmma: bool) -> List[str]:
    """The kernel families a GPU of compute capability cap runs with this build."""
    fams = ["direct (CUDA cores)", "narrow (1-8 outputs per group)", "implicit GEMM (CUDA cores)"]
    if cap >= (8, 0):
        fams += ["tensor-core implicit GEMM (mma.sync)", "tensor-core direct", "patch GEMM",
                 "tensor-core grad_weight"]
    if cap == (9, 0) and wgmma:
        fams += ["Hopper wgmma + TMA: halo GEMM (3xFP16 / 3xTF32), warp-specialised GEMM, "
                 "grad_weight"]
    return fams


def hopper_without_sm90a(cap, build: Optional[Dict[str, Any]]) -> bool:
    return cap == (9, 0) and build is not None and bool(build["cuda_toolkit"]) and \
        not build["wgmma"]


FAST_BUILD_HINT = ("pip install the convt2d wheel for your CUDA version (it carries sm_90a), or "
                   "rebuild from source with TORCH_CUDA_ARCH_LIST=9.0a (or unset on the H100 "
                   "itself): pip install --no-build-isolation --no-deps --force-reinstall -e .")


def info() -> Dict[str, Any]:
    from . import _C, __version__, cuda_available
    from ._build_check import build_info

    build = build_info()
    d: Dict[str, Any] = {
        "convt2d": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "built_against_torch": build["torch"] if build else None,
        "built_with_cuda": build["cuda_toolkit"] if build else None,
        "built_for": build["arch_list"] if build else None,
        "hopper_kernels_built": bool(build and build["wgmma"]),
        "cuda_kernels": cuda_available(),
        "gpu": None,
        "gpu_code": None,
        "kernel_families": ["CPU"],
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "autotune": _C._tuning_info(),
    }
    if torch.cuda.is_available() and cuda_available():
        i = torch.cuda.current_device()
        cap = torch.cuda.get_device_capability(i)
        d["gpu"] = f"{torch.cuda.get_device_name(i)} (sm_{cap[0]}{cap[1]})"
        d["gpu_code"] = runs_on(build["arch_list"], cap) if build else None
        if d["gpu_code"] or build is None:
            d["kernel_families"] = kernel_families(cap, bool(build and build["wgmma"]))
        if hopper_without_sm90a(cap, build):
            d["warning"] = f"this build lacks the Hopper (sm_90a) kernels: {FAST_BUILD_HINT}"
    return d


_warned = [False]


def warn_if_slow_build(device: torch.device) -> None:
    """Once per process: a Hopper GPU running a build without its sm_90a kernels."""
    _warned[0] = True
    try:
        from ._build_check import build_info

        cap = torch.cuda.get_device_capability(device)
        if hopper_without_sm90a(cap, build_info()):
            warnings.warn("convt2d: this build has no Hopper (sm_90a) kernels, so on this GPU "
                          f"it runs its slower portable ones. {FAST_BUILD_HINT}", stacklevel=3)
    except Exception:  # never let the hint break a call
        pass


def main() -> int:
    print(json.dumps(info(), indent=1))
    return 0
