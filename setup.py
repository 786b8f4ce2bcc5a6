"""Build convt2d: one compiled module, convt2d._C.

CUDAExtension when a CUDA toolkit is found, CppExtension (CPU only) otherwise.
Environment:
  CUDA_HOME               toolkit root (found automatically when unset)
  CONVT2D_FORCE_CPU=1     build the CPU-only module even if a toolkit exists
  TORCH_CUDA_ARCH_LIST    GPU targets, e.g. "9.0a" or "8.0;8.6;8.9;9.0a" ("9.0a" adds the
                          Hopper wgmma kernels; "9.0" builds only the portable ones). Unset:
                          the visible GPUs (a Hopper GPU -> "9.0a"), or with none visible the
                          wheels' list (wheel_arch_list below).
  CONVT2D_WHEEL_ARCHS=1   the wheels' list whatever GPUs are visible (scripts/build_wheel.sh
                          and the wheels workflow set it)
  MAX_JOBS                parallel compile jobs (default: the cores, capped so that each job
                          has about 3 GB of the memory available)
  CONVT2D_LOCAL_VERSION   PEP 440 local version label, e.g. "cu130.torch2.14" -> version
                          0.1.0+cu130.torch2.14 (scripts/build_wheel.sh and the wheels
                          workflow set it)

The build writes python/convt2d/_build_info.py (not in git): the torch it was built against,
the CUDA toolkit and GPU targets. convt2d's import checks the running torch against it.
"""
import functools
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

# Commands that need only the metadata (an sdist, pip's metadata step) run without torch;
# building the extension needs the torch it will run with, so without torch it stops
# here. (With pip's build isolation a build would compile against whatever torch pip
# put into the isolated environment, not the user's, and fail to import under theirs:
# hence torch is no build requirement in pyproject.toml and builds use
# --no-build-isolation.)
METADATA_ONLY = {"egg_info", "dist_info", "sdist", "--version", "--name", "--help"}
try:
    import torch  # noqa: E402
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402
except ImportError as e:
    if not METADATA_ONLY & set(sys.argv[1:]):
        raise SystemExit(
            f"convt2d: cannot import torch ({e}). convt2d compiles against the torch it will run "
            "with: install torch first, then build without pip's build isolation, e.g.\n"
            "    pip install --no-build-isolation convt2d        (or: pip install "
            "--no-build-isolation -e .)\n"
            "(with build isolation pip would build against a different torch in a temporary "
            "environment, and the result would not import under yours)")
    torch = None


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
    """Never a pin: installing convt2d must not replace the user's torch. The C++ ABI
    differs between torch minors, so a build serves the minor it was built against (one
    wheel per torch minor x CUDA version, told apart by the local version label); under
    another minor `import convt2d` raises an ImportError that names both versions and the
    fix (python/convt2d/_build_check.py)."""
    return "torch>=2.4"


@functools.lru_cache(maxsize=None)
def toolkit_version(home):
    """(major, minor) of the toolkit's nvcc, or None (asked once per build)."""
    import subprocess

    try:
        out = subprocess.run([os.path.join(home, "bin", "nvcc"), "--version"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def wheel_arch_list(cuda_version):
    """The GPUs a wheel (or a build on a machine with no GPU) covers: Ampere (8.0, 8.6), Ada
    (8.9), Hopper as sm_90a (its wgmma / TMA kernels; plain sm_90 machine code beside it
    would leave the driver to choose, so none), and Blackwell (10.0, 12.0) where the toolkit
    has it (CUDA 12.8+), plus PTX of the newest portable target for later GPUs (sm_90a's PTX
    is arch-specific and runs on 9.0 only, so with CUDA < 12.8 the PTX is 8.9's)."""
    archs = ["8.0", "8.6", "8.9", "9.0a"]
    if cuda_version and cuda_version >= (12, 8):
        archs += ["10.0", "12.0+PTX"]
    else:
        archs[2] += "+PTX"
    return ";".join(archs)


def visible_gpu_arch_list():
    """The visible GPUs' targets ("9.0a" for Hopper: the fast kernels), or None."""
    try:
        if not torch.cuda.is_available():
            return None
        caps = sorted({torch.cuda.get_device_capability(i)
                       for i in range(torch.cuda.device_count())})
        # as torch's own default: a GPU newer than torch knows is built for the newest it does
        known = [(int(a[3:-1]), int(a[-1])) for a in torch.cuda.get_arch_list()
                 if re.fullmatch(r"sm_\d+", a)]
        if known:
            caps = sorted({min(c, max(known)) for c in caps})
    except Exception:
        return None
    return ";".join("9.0a" if c == (9, 0) else f"{c[0]}.{c[1]}" for c in caps) or None


def choose_arch_list(home):
    """TORCH_CUDA_ARCH_LIST as given; else the wheels' list with CONVT2D_WHEEL_ARCHS=1 or no
    GPU visible; else the visible GPUs'. (torch's own default, with the variable unset,
    picks plain 9.0 on Hopper, which leaves the wgmma kernels out, and fails outright with
    no GPU visible.)"""
    given = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if given:
        return given, "TORCH_CUDA_ARCH_LIST"
    if os.environ.get("CONVT2D_WHEEL_ARCHS") != "1":
        vis = visible_gpu_arch_list()
        if vis:
            return vis, "the visible GPUs"
    why = "CONVT2D_WHEEL_ARCHS=1" if os.environ.get("CONVT2D_WHEEL_ARCHS") == "1" else "no GPU visible"
    return wheel_arch_list(toolkit_version(home)), f"the wheels' list ({why})"


def default_max_jobs():
    """The cores, capped at one job per ~3 GB of available memory (a multi-arch nvcc job
    of the largest files takes 2-3 GB): a laptop build does not run out of RAM."""
    n = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable:"))
        n = max(1, min(n, kb // (3 * 1024 * 1024)))
    except (OSError, StopIteration, ValueError):
        pass
    return n


BUILD_INFO = {}  # what this build is: filled below, written by BuildExt after a build


def build_info_text():
    return ("# Written by setup.py after a successful build (not in git).\n"
            f"TORCH_VERSION = {torch.__version__!r}\n"
            f"TORCH_CUDA = {torch.version.cuda!r}\n"
            f"CUDA_TOOLKIT = {BUILD_INFO['cuda']!r}\n"
            f"ARCH_LIST = {BUILD_INFO['arch_list']!r}\n"
            f"WGMMA = {bool(BUILD_INFO['wgmma'])!r}\n")


def make_build_ext(base):
    """build_ext that writes convt2d/_build_info.py (read by convt2d's import check and
    convt2d.info()) once the module is built, never for a metadata-only command or a failed
    build: beside the built module (the source tree for in-place and editable builds, the
    build folder for a wheel)."""

    class BuildExt(base):
        def run(self):
            super().run()
            targets = []
            if self.inplace or getattr(self, "editable_mode", False):
                targets.append(os.path.join(ROOT, "python", "convt2d"))
            if not self.inplace and self.build_lib:
                targets.append(os.path.join(self.build_lib, "convt2d"))
            for d in targets:
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "_build_info.py"), "w") as f:
                    f.write(build_info_text())

    return BuildExt


common_sources = (["csrc/ops.cpp", "csrc/glue.cpp", "csrc/tuning.cpp", "csrc/algo.cpp"] + sorted(glob.glob("csrc/autograd/*.cpp"))
                  + sorted(glob.glob("csrc/cpu/*.cpp")))
cuda_sources = (sorted(glob.glob("csrc/cuda/**/*.cpp", recursive=True))
                + sorted(glob.glob("csrc/cuda/**/*.cu", recursive=True)))
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

ext_modules, cmdclass = [], {}
if torch is not None:
    if "MAX_JOBS" not in os.environ:
        os.environ["MAX_JOBS"] = str(default_max_jobs())

    if cuda_home:
        print(f"convt2d: building with CUDA from {cuda_home}", file=sys.stderr)
        arch_list, arch_why = choose_arch_list(cuda_home)
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list  # read by torch's BuildExtension
        print(f"convt2d: GPU targets {arch_list} (from {arch_why}); MAX_JOBS={os.environ['MAX_JOBS']}",
              file=sys.stderr)
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
        archs = arch_list.replace(" ", ";").split(";")
        wgmma = bool({"9.0a", "9.0a+PTX"} & set(archs)) and not {"9.0", "9.0+PTX"} & set(archs)
        if wgmma:
            macros.append(("CONVT2D_WGMMA", "1"))
            print("convt2d: sm_90a in TORCH_CUDA_ARCH_LIST: building the wgmma kernels", file=sys.stderr)
        elif any(a.startswith("9.0") for a in archs):
            print("convt2d: warning: plain 9.0 in TORCH_CUDA_ARCH_LIST: the Hopper wgmma / TMA "
                  "kernels are left out (use 9.0a)", file=sys.stderr)
        tk = toolkit_version(cuda_home)
        BUILD_INFO.update(cuda="%d.%d" % tk if tk else "unknown", arch_list=arch_list, wgmma=wgmma)
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
        BUILD_INFO.update(cuda=None, arch_list="", wgmma=False)
        ext = CppExtension(
            "convt2d._C",
            common_sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=link_args(),
        )
    ext_modules, cmdclass = [ext], {"build_ext": make_build_ext(BuildExtension)}

setup(
    version=package_version(),
    install_requires=[torch_requirement()],
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
