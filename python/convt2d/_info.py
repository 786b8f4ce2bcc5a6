"""What this convt2d install is, and what it has tuned.

    python -m convt2d.info          # prints it
    convt2d.info()                  # the same as a dict

``autotune`` counts the work of ``torch.backends.cudnn.benchmark = True``: ``tunings`` is the
number of problems timed (each at most once per process), ``cache_hits`` the calls that
reused a cached choice, ``candidate_failures`` the candidates skipped while tuning;
``convt2d.tuning_log()`` lists every tuned problem with each candidate's time, or why it was
skipped, and the choice.
"""
import json
from typing import Any, Dict, List

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


def info() -> Dict[str, Any]:
    from . import _C, __version__, cuda_available

    d: Dict[str, Any] = {
        "convt2d": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_kernels": cuda_available(),
        "gpu": None,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "autotune": _C._tuning_info(),
    }
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        cap = torch.cuda.get_device_capability(i)
        d["gpu"] = f"{torch.cuda.get_device_name(i)} (sm_{cap[0]}{cap[1]})"
    return d


def main() -> int:
    print(json.dumps(info(), indent=1))
    return 0
