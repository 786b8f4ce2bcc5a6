"""Build the bare probe module with torch.utils.cpp_extension.load (ninja, torch's own flags
only: none of Python's sysconfig CFLAGS/LDSHARED, unlike setup.py builds).

usage: python load_probe.py NAME BUILD_DIR
Writes BUILD_DIR/NAME.so (importable as module NAME: it has PyInit_NAME).
"""
import os
import sys

import torch  # noqa: F401
from torch.utils.cpp_extension import load

name, build_dir = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(build_dir, exist_ok=True)
path = load(name=name, sources=[os.path.join(here, "ext_probe.cpp")],
            extra_cflags=["-O3", f"-DPROBE_NS={name}"], build_directory=build_dir,
            verbose=True, is_python_module=False)
print("built", path)
