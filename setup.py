"""Build convt2d: one compiled module, convt2d._C.

CUDAExtension when a CUDA toolkit is found, CppExtension (CPU only) otherwise.
Environment:
  CUDA_HOME               toolkit root (found automatically when unset)
  CONVT2D_FORCE_CPU=1     build the CPU-only module even if a toolkit exists
  TORCH_CUDA_ARCH_LIST    GPU targets, e.g. "9.0a" or "8.0;8.6;8.9;9.0a" ("9.0a" adds the
                          Hopper wgmma kernels; "9.0" builds only the portable ones)
  MAX_JOBS                parallel compile jobs
  CONVT2D_LOCAL_VERSION   PEP 440 local version label, e.g. "cu128" -> version 0.1.0+cu128
                          (scripts/build_wheel.sh and the wheels workflow set it)
  CONVT2D_PIN_TORCH=1     make the wheel require the torch minor release it was built
                          against (torch==2.9.*): the C++ ABI differs between minors
"""
import glob
import os
import re
import shutil
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def package_version():
    """The version in python/convt2d/__init__.py (the single source), plus the
    local label from CONVT2D_LOCAL_VERSION ("cu128" or "+cu128")."""
    with open(os.path.join(ROOT, "python", "convt2d", "__init__.py")) as f:
        m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', f.read(), re.M)
    if not m:
        raise RuntimeError("convt2d: no __version__ in python/convt2d/__init__.py")
    version = m.group(1)
    local = os.environ.get("CONVT2D_LOCAL_VERSION", "").strip().lstrip("+")
    if local:
        if not re.fullmatch(r"[A-Za-z0-9]+(?:[.][A-Za-z0-9]+)*", local):
            raise ValueError(f"convt2d: CONVT2D_LOCAL_VERSION={local!r} is not a PEP 440 "
                             "local version label (letters, digits and dots, e.g. cu128)")
        version += "+" + local
    return version


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


def cuda_library_include_dirs(home):
    """Headers of the CUDA math libraries that torch's CUDA headers include
    (cublas_v2.h, cusparse.h, cusolverDn.h from ATen/cuda/CUDAContext.h). A
    minimal toolkit (nvcc + cudart only) lacks them; then take them from the
    nvidia-* wheels that a pip-installed torch depends on. Only those headers
    are linked into a private folder, so that the toolkit's own cuda_runtime.h
    and friends keep precedence over the wheels' copies."""
    if os.path.exists(os.path.join(home, "include", "cublas_v2.h")):
        return []
    site = os.path.dirname(os.path.dirname(torch.__file__))
    prefixes = ("cublas", "cusparse", "cusolver", "cufft", "curand")
    found = {}
    for inc in sorted(glob.glob(os.path.join(site, "nvidia", "*", "include"))):
        for h in sorted(os.listdir(inc)):
            if h.startswith(prefixes) and h.endswith(".h"):
                found.setdefault(h, os.path.join(inc, h))
    if "cublas_v2.h" not in found:
        print("convt2d: warning: no cublas_v2.h in the toolkit or torch's nvidia wheels; "
              "code that includes ATen/cuda/CUDAContext.h will not compile", file=sys.stderr)
        return []
    out = os.path.join(ROOT, "build", "cuda-lib-headers")
    os.makedirs(out, exist_ok=True)
    for h, src in found.items():
        dst = os.path.join(out, h)
        if os.path.lexists(dst):
            os.remove(dst)
        os.symlink(src, dst)
    return [out]


def torch_requirement():
    if os.environ.get("CONVT2D_PIN_TORCH") == "1":
        major, minor = torch.__version__.split("+")[0].split(".")[:2]
        return f"torch=={major}.{minor}.*"
    return "torch>=2.4"


common_sources = (["csrc/ops.cpp", "csrc/glue.cpp", "csrc/tuning.cpp"] + sorted(glob.glob("csrc/autograd/*.cpp"))
                  + sorted(glob.glob("csrc/cpu/*.cpp")))
cuda_sources = sorted(glob.glob("csrc/cuda/*.cpp")) + sorted(glob.glob("csrc/cuda/*.cu"))
# No -std flag: torch's BuildExtension adds the standard its own headers need
# (c++17 up to torch 2.11, c++20 later; torch 2.14's c10 headers fail under c++17).
cxx_flags = ["-O3"]
include_dirs = [os.path.join(ROOT, "csrc")]


def link_args():
    """Link the C++ runtime as a shared library on Linux. Some toolchains
    (e.g. a GCC built into /opt/gcc whose driver links libstdc++ statically)
    would otherwise put a private copy of libstdc++ into _C.so: that copy's
    locale is never initialised, so formatting a number into an error message
    segfaults and exceptions meet two C++ runtimes. Naming the shared library
    first makes the linker resolve every libstdc++ symbol from it; a static
    archive the driver appends later then contributes nothing.
    CONVT2D_STATIC_LIBSTDCXX_OK=1 skips this."""
    if not sys.platform.startswith("linux") or os.environ.get("CONVT2D_STATIC_LIBSTDCXX_OK") == "1":
        return []
    return ["-Wl,--no-as-needed", "-l:libstdc++.so.6", "-Wl,--as-needed"]

if cuda_home:
    print(f"convt2d: building with CUDA from {cuda_home}", file=sys.stderr)
    extra_inc = cuda_library_include_dirs(cuda_home)
    if extra_inc:
        print(f"convt2d: CUDA library headers from {extra_inc}", file=sys.stderr)
    nvcc_flags = [
        "-O3",
        "--use_fast_math",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    ]
    macros = [("CONVT2D_WITH_CUDA", "1")]
    # Hopper wgmma kernels need the arch-specific target sm_90a
    # (TORCH_CUDA_ARCH_LIST="9.0a", alone or with others); plain "9.0" builds
    # run the portable mma.sync kernels on Hopper too.
    # A plain sm_90 cubin next to sm_90a would leave it to the driver which of
    # the two an H100 loads, so the wgmma kernels are built only without one.
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(" ", ";").split(";")
    if "9.0a" in archs and not {"9.0", "9.0+PTX"} & set(archs):
        macros.append(("CONVT2D_WGMMA", "1"))
        print("convt2d: sm_90a in TORCH_CUDA_ARCH_LIST: building the wgmma kernels", file=sys.stderr)
    ext = CUDAExtension(
        "convt2d._C",
        common_sources + cuda_sources,
        include_dirs=include_dirs + extra_inc,
        define_macros=macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        extra_link_args=link_args(),
    )
else:
    print("convt2d: no CUDA toolkit found (or CONVT2D_FORCE_CPU=1): building CPU-only",
          file=sys.stderr)
    ext = CppExtension(
        "convt2d._C",
        common_sources,
        include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_args(),
    )

setup(
    version=package_version(),
    install_requires=[torch_requirement()],
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
)
