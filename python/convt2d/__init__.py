"""convt2d: a fast, drop-in transposed 2-D convolution for PyTorch.

    import convt2d
    y = convt2d.forward(x, w, bias, stride, padding, output_padding, groups, dilation)
    m = convt2d.ConvTranspose2d(64, 32, 4, stride=2, padding=1)   # nn.ConvTranspose2d drop-in
    model = convt2d.convert(model)                                 # swap every nn.ConvTranspose2d

``convt2d.info()`` (or ``python -m convt2d.info``) says what the install is and what
``torch.backends.cudnn.benchmark = True`` has tuned (``convt2d.tuning_log()``).

The ops are registered as ``torch.ops.convt2d.forward`` and ``torch.ops.convt2d.backward``.
"""
import torch  # noqa: F401  (loads libc10/libtorch before the extension)

from . import _build_check

# A mismatched install: a clear ImportError, not a symbol trace.
_build_check.check_torch(_build_check.build_info())
try:
    from . import _C  # noqa: F401  (loads the compiled ops)
except (ImportError, OSError) as _e:
    raise _build_check.load_error(_e, _build_check.build_info()) from _e
from . import _ops  # noqa: F401  (autograd and fake kernels)
from ._info import clear_tuning_cache, info, last_algorithms, tuning_log
from .functional import conv_transpose2d, forward
from .modules import ConvTranspose2d, convert

__version__ = "0.1.0"


def cuda_available() -> bool:
    """True when this build of convt2d has CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("convt2d::forward", "CUDA")


__all__ = ["forward", "conv_transpose2d", "ConvTranspose2d", "convert", "cuda_available", "info",
           "tuning_log", "clear_tuning_cache", "last_algorithms"]
