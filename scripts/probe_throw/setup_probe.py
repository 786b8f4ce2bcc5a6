"""Build one probe module through torch's BuildExtension, the path setup.py takes (so Python's
sysconfig compiler/link flags apply exactly as for convt2d._C).

usage (run with cwd = an empty build dir, not the repo root: the repo's pyproject.toml
would be read):
    python setup_probe.py NAME KIND STD OUTDIR [extra cxx flags ...]
KIND: pybind | bare | barecu;  STD: "default" (torch picks) or e.g. c++17 / c++20.
"""
import os
import sys

from setuptools import setup

name, kind, std, outdir = sys.argv[1:5]
extra = sys.argv[5:]
here = os.path.dirname(os.path.abspath(__file__))

from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402

std_flag = [] if std == "default" else ["-std=" + std]
cxx = ["-O3"] + std_flag + extra
macros = [("PROBE_NS", name)]
sources = [os.path.join(here, "ext_probe.cpp")]
if kind == "pybind":
    macros.append(("PROBE_PYBIND", "1"))
if kind == "barecu":
    macros.append(("PROBE_WITH_CUDA", "1"))
    sources.append(os.path.join(here, "ext_probe_kernel.cu"))
    nvcc = ["-O3", "--use_fast_math", "-lineinfo", "--expt-relaxed-constexpr"] + std_flag
    ext = CUDAExtension(name, sources, define_macros=macros,
                        extra_compile_args={"cxx": cxx, "nvcc": nvcc})
else:
    ext = CppExtension(name, sources, define_macros=macros, extra_compile_args={"cxx": cxx})

setup(
    name="probe_" + name,
    version="0.0",
    py_modules=[],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    script_args=["build_ext", "--build-lib", outdir, "--build-temp", os.path.join(outdir, "tmp")],
)
