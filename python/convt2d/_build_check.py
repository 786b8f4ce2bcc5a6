"""What this build of convt2d is (python/convt2d/_build_info.py, written by the build), and
the import-time checks that turn a mismatched install into a clear ImportError.

A compiled extension serves the torch minor release it was built against (torch's C++ ABI
changes between minors): convt2d's wheels come one per torch minor x CUDA version (the
local version label says which, e.g. 0.1.0+cu130.torch2.14) and never pin torch, so that
installing one never replaces the user's torch. Under another torch minor, or a CUDA build
under a CPU-only torch, `import convt2d` raises an ImportError naming both versions and the
fix, before loading the compiled module.
"""
from typing import Any, Dict, Optional

import torch

FIX = ("install the convt2d build for your torch, or build it from source against it: "
       "pip install --no-build-isolation --no-deps --force-reinstall convt2d "
       "(from a checkout: pip install --no-build-isolation -e .)")


def build_info() -> Optional[Dict[str, Any]]:
    """The build's record, or None (a build that wrote none, e.g. an older one)."""
    try:
        from . import _build_info as b
    except ImportError:
        return None
    return {"torch": b.TORCH_VERSION, "torch_cuda": b.TORCH_CUDA, "cuda_toolkit": b.CUDA_TOOLKIT,
            "arch_list": b.ARCH_LIST, "wgmma": b.WGMMA}


def _minor(v: str) -> str:
    return ".".join(v.split("+")[0].split(".")[:2])


def check_torch(info: Optional[Dict[str, Any]]) -> None:
    """Raises ImportError when the running torch is not the one this build serves."""
    if info is None:
        return
    built, running = info["torch"], torch.__version__
    if _minor(built) != _minor(running):
        raise ImportError(
            f"convt2d was built against torch {built}, but torch {running} is installed: a "
            f"build serves only the torch minor release it was compiled against "
            f"({_minor(built)}.x). Fix: {FIX}.")
    if info["cuda_toolkit"] and torch.version.cuda is None:
        raise ImportError(
            f"convt2d was built with CUDA {info['cuda_toolkit']} for torch {built} (CUDA "
            f"{info['torch_cuda']}), but the installed torch {running} is a CPU-only build. "
            f"Fix: install torch's CUDA build, or a CPU-only convt2d "
            f"(CONVT2D_FORCE_CPU=1 pip install --no-build-isolation --no-deps --force-reinstall "
            f"convt2d).")


def load_error(e: BaseException, info: Optional[Dict[str, Any]]) -> ImportError:
    """The ImportError for a compiled module that failed to load (undefined symbols, a
    missing CUDA library)."""
    built = f"torch {info['torch']}" if info else "an unknown torch"
    return ImportError(
        f"convt2d's compiled module failed to load ({type(e).__name__}: {e}). It was built "
        f"against {built}; torch {torch.__version__} (CUDA {torch.version.cuda}) is installed. "
        f"Fix: {FIX}.")
