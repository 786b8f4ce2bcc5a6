"""``python -m convt2d.info``: print what this convt2d install is (convt2d.info())."""
import sys
import types
from typing import Any, Dict

from ._info import info, main  # noqa: F401


class _CallableModule(types.ModuleType):
    """``import convt2d.info`` rebinds the package's ``info`` function to this module: calling
    the module still returns the dict."""

    def __call__(self) -> Dict[str, Any]:
        return info()


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
