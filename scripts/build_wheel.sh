#!/usr/bin/env bash
# Build a convt2d wheel locally with the settings of .github/workflows/wheels.yml.
#
#   scripts/build_wheel.sh                 # CUDA wheel for the toolkit found (e.g. 0.1.0+cu130)
#   scripts/build_wheel.sh --cpu           # CPU-only wheel (CONVT2D_FORCE_CPU=1), 0.1.0+cpu
#   scripts/build_wheel.sh --arch-list 9.0 --out /tmp/wh
#   scripts/build_wheel.sh --repair        # then auditwheel repair -> manylinux tag
#   scripts/build_wheel.sh --find-cuda-home   # print the toolkit root setup.py would use
#   scripts/build_wheel.sh --print-arch-list  # print the wheels' GPU targets for that toolkit
#
# Options / environment (an option wins over its variable):
#   --cpu                      CONVT2D_FORCE_CPU=1     CPU-only build
#   --cuda-version 12.8        CONVT2D_CUDA_VERSION    expected toolkit version (checked against nvcc)
#   --arch-list "..."          TORCH_CUDA_ARCH_LIST    default: the wheels' list, setup.py's
#                                                      wheel_arch_list() for the toolkit
#                                                      (CUDA 13.0: 8.0;8.6;8.9;9.0a;10.0;12.0+PTX)
#   --local-version LABEL      CONVT2D_LOCAL_VERSION   default cuXYZ.torchX.Y (the toolkit and the
#                                                      torch minor built against), or cpu.torchX.Y;
#                                                      "" for none
#   --out DIR                  CONVT2D_WHEELHOUSE      default <repo>/wheelhouse
#   --python PY                PYTHON                  interpreter with torch installed (python3)
#   --repair                                           auditwheel repair (excluding torch's libs)
#   --keep-build                                       keep the staging folder (printed)
#                              MAX_JOBS                default: setup.py's (cores, capped by memory)
# The wheel requires torch>=2.4, never a pin (installing it must not replace the user's
# torch); it serves the torch minor it was built against, which its label names, and
# under another minor `import convt2d` raises an ImportError saying so.
#
# The wheel is built with `pip wheel --no-build-isolation --no-deps` against the
# torch already installed for $PYTHON, from a copy of the source tree in a fresh
# staging folder: nothing is written into the repository but the wheel, and no
# object file of an earlier (say CUDA) build can leak into this one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
CPU="${CONVT2D_FORCE_CPU:-0}"
CUDA_VERSION="${CONVT2D_CUDA_VERSION:-}"
ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-}"
OUT="${CONVT2D_WHEELHOUSE:-$ROOT/wheelhouse}"
REPAIR=0
KEEP=0
FIND_ONLY=0
PRINT_ARCHS=0
if [[ -n "${CONVT2D_LOCAL_VERSION+set}" ]]; then LOCAL_SET=1; LOCAL="$CONVT2D_LOCAL_VERSION"; else LOCAL_SET=0; LOCAL=""; fi

die() { echo "build_wheel.sh: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) CPU=1 ;;
    --cuda-version) CUDA_VERSION="${2:?}"; shift ;;
    --arch-list) ARCH_LIST="${2:?}"; shift ;;
    --local-version) LOCAL="${2-}"; LOCAL_SET=1; shift ;;
    --out) OUT="${2:?}"; shift ;;
    --python) PY="${2:?}"; shift ;;
    --repair) REPAIR=1 ;;
    --keep-build) KEEP=1 ;;
    --find-cuda-home) FIND_ONLY=1 ;;
    --print-arch-list) PRINT_ARCHS=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

# The toolkit root, found by setup.py's own find_cuda_home() (one implementation:
# the function is taken out of setup.py and run alone, without running setup()).
find_cuda_home() {
  "$PY" - "$ROOT/setup.py" <<'PYEOF'
import ast, sys
src = open(sys.argv[1]).read()
fn = next(n for n in ast.parse(src).body
          if isinstance(n, ast.FunctionDef) and n.name == "find_cuda_home")
ns = {}
exec("import glob, os, shutil\n" + ast.get_source_segment(src, fn), ns)
print(ns["find_cuda_home"]() or "")
PYEOF
}

# The wheels' GPU targets for the toolkit at $1: setup.py's wheel_arch_list() and
# toolkit_version(), taken out and run alone as find_cuda_home() above.
wheel_arch_list() {
  "$PY" - "$ROOT/setup.py" "$1" <<'PYEOF'
import ast, sys
src = open(sys.argv[1]).read()
ns = {}
for n in ast.parse(src).body:
    if isinstance(n, ast.FunctionDef) and n.name in ("wheel_arch_list", "toolkit_version"):
        exec("import os, re\n" + ast.get_source_segment(src, n), ns)
print(ns["wheel_arch_list"](ns["toolkit_version"](sys.argv[2])))
PYEOF
}

if [[ "$FIND_ONLY" == 1 || "$PRINT_ARCHS" == 1 ]]; then
  home="$(find_cuda_home)"
  [[ -n "$home" ]] || exit 1
  if [[ "$FIND_ONLY" == 1 ]]; then echo "$home"; else wheel_arch_list "$home"; fi
  exit 0
fi

"$PY" -c "import torch" 2>/dev/null || die "$PY cannot import torch: install it first (the build uses --no-build-isolation)"
# torch runs the `ninja` on PATH; the pip package installs it beside $PY.
PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
command -v ninja >/dev/null || echo "build_wheel.sh: warning: no ninja on PATH; torch will compile serially (pip install ninja)" >&2

if [[ "$CPU" == 1 ]]; then
  export CONVT2D_FORCE_CPU=1
  tag=cpu
  echo "build_wheel.sh: CPU-only wheel"
else
  unset CONVT2D_FORCE_CPU
  home="$(find_cuda_home)"
  [[ -n "$home" ]] || die "no CUDA toolkit found (set CUDA_HOME, or pass --cpu for a CPU-only wheel)"
  export CUDA_HOME="$home"
  nvcc_ver="$("$home/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
  [[ -n "$nvcc_ver" ]] || die "cannot read the version of $home/bin/nvcc"
  if [[ -n "$CUDA_VERSION" && "$CUDA_VERSION" != "$nvcc_ver" ]]; then
    die "asked for CUDA $CUDA_VERSION but the toolkit at $home is $nvcc_ver"
  fi
  torch_cuda="$("$PY" -c 'import torch; print(torch.version.cuda or "")')"
  if [[ -z "$torch_cuda" ]]; then
    die "torch for $PY is a CPU-only build: install a CUDA build of torch, or pass --cpu"
  elif [[ "${torch_cuda%%.*}" != "${nvcc_ver%%.*}" ]]; then
    die "torch was built with CUDA $torch_cuda, the toolkit is $nvcc_ver: major versions must match"
  fi
  tag="cu${nvcc_ver//./}"
  [[ -n "$ARCH_LIST" ]] || ARCH_LIST="$(wheel_arch_list "$home")"
  export TORCH_CUDA_ARCH_LIST="$ARCH_LIST"
  echo "build_wheel.sh: CUDA $nvcc_ver wheel from $home (torch built with CUDA $torch_cuda), archs $TORCH_CUDA_ARCH_LIST"
fi
torch_minor="$("$PY" -c 'import torch; print(".".join(torch.__version__.split("+")[0].split(".")[:2]))')"
[[ "$LOCAL_SET" == 1 ]] || LOCAL="$tag.torch$torch_minor"
export CONVT2D_LOCAL_VERSION="$LOCAL"
# (MAX_JOBS: setup.py's default, the cores capped by available memory, unless set)

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/convt2d-wheel.XXXXXX")"
if [[ "$KEEP" == 1 ]]; then
  echo "build_wheel.sh: staging folder $STAGE (kept)"
else
  trap 'rm -rf "$STAGE"' EXIT
fi

# Copy the source tree: tracked and untracked-but-not-ignored files when this is
# a git checkout, else everything but build outputs (an unpacked sdist).
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$ROOT" && git ls-files -z -co --exclude-standard \
     | while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done \
     | tar --null -T - -cf -) | tar -xf - -C "$STAGE"
else
  (cd "$ROOT" && tar --exclude=./.git --exclude=./build --exclude=./wheelhouse \
     --exclude='*.so' --exclude='*.o' --exclude='*.egg-info' -cf - .) | tar -xf - -C "$STAGE"
fi

echo "build_wheel.sh: version label '${CONVT2D_LOCAL_VERSION}', MAX_JOBS=${MAX_JOBS:-setup.py default}, out $OUT"
start=$SECONDS
(cd "$STAGE" && "$PY" -m pip wheel --no-build-isolation --no-deps -v -w "$STAGE/dist" .)
wheels=("$STAGE"/dist/convt2d-*.whl)
[[ -e "${wheels[0]}" ]] || die "pip wheel produced no convt2d wheel"
echo "build_wheel.sh: built $(basename "${wheels[0]}") in $((SECONDS - start)) s"

if [[ "$REPAIR" == 1 ]]; then
  # Keep in sync with CIBW_REPAIR_WHEEL_COMMAND in .github/workflows/wheels.yml:
  # torch's own libraries (and the CUDA runtime it brings) are loaded by
  # `import torch` before convt2d._C, so they must not be vendored.
  "$PY" -m auditwheel --version >/dev/null 2>&1 || die "--repair needs auditwheel (pip install auditwheel)"
  "$PY" -m auditwheel repair -w "$OUT" \
    --exclude libtorch.so --exclude libtorch_cpu.so --exclude libtorch_cuda.so \
    --exclude libtorch_python.so --exclude libc10.so --exclude libc10_cuda.so \
    --exclude 'libcudart.so.*' \
    "${wheels[0]}"
else
  cp "${wheels[0]}" "$OUT/"
  echo "$OUT/$(basename "${wheels[0]}")"
fi
