"""Build convt2d: one compiled module, convt2d._C.

CUDAExtension when a CUDA toolkit is found, CppExtension (CPU only) otherwise.
Environment:
  CUDA_HOME               toolkit root (found automatically when unset)
  CONVT2D_FORCE_CPU=1     build the CPU-only module even if a toolkit exists
  TORCH_CUDA_ARCH_LIST    GPU targets, e.g. "9.0" or "8.0;8.6;8.9;9.0+PTX"
  MAX_JOBS                parallel compile jobs
"""
import glob
import os
import shutil
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def find_cuda_home():
    """The real toolkit root. `nvcc` on PATH may be a wrapper script, from
    which torch would guess the wrong root, so prefer a directory that holds
    both bin/nvcc and the runtime library."""
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return env
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        candidates.append(os.path.dirname(os.path.dirname(real)))
        try:  # a wrapper script: `exec /usr/local/cuda-13.0/bin/nvcc "$@"`
            with open(nvcc, "r", errors="ignore") as f:
                for tok in f.read(4096).split():
                    if tok.endswith("/bin/nvcc") and os.path.exists(tok):
                        candidates.append(os.path.dirname(os.path.dirname(tok)))
        except OSError:
            pass
    candidates += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in candidates:
        has_nvcc = os.path.exists(os.path.join(c, "bin", "nvcc"))
        has_rt = any(
            glob.glob(os.path.join(c, d, "libcudart*"))
            for d in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")
        )
        if has_nvcc and has_rt:
            return c
    return None


cuda_home = None if os.environ.get("CONVT2D_FORCE_CPU") == "1" else find_cuda_home()
if cuda_home:
    os.environ["CUDA_HOME"] = cuda_home  # must be set before torch.utils.cpp_extension loads

import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402

common_sources = ["csrc/ops.cpp", "csrc/glue.cpp"] + sorted(glob.glob("csrc/cpu/*.cpp"))
cuda_sources = sorted(glob.glob("csrc/cuda/*.cpp")) + sorted(glob.glob("csrc/cuda/*.cu"))
cxx_flags = ["-O3", "-std=c++17"]
include_dirs = [os.path.join(ROOT, "csrc")]

if cuda_home:
    print(f"convt2d: building with CUDA from {cuda_home}", file=sys.stderr)
    nvcc_flags = [
        "-O3",
        "-std=c++17",
        "--use_fast_math",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    ]
    ext = CUDAExtension(
        "convt2d._C",
        common_sources + cuda_sources,
        include_dirs=include_dirs,
        define_macros=[("CONVT2D_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )
else:
    print("convt2d: no CUDA toolkit found (or CONVT2D_FORCE_CPU=1): building CPU-only",
          file=sys.stderr)
    ext = CppExtension(
        "convt2d._C",
        common_sources,
        include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags},
    )

setup(
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
)
