#!/usr/bin/env bash
# Probe for the defect "a TORCH_CHECK failure inside convt2d's compiled op ends the process
# (segfault / std::terminate) instead of raising" (seen with torch 2.11.0+cu130, GCC 13.3,
# Python 3.12 on the GPU machine; fine with torch 2.14.1 locally).
#
# Run from the repo root, after the main build (python setup.py build_ext --inplace), e.g.
#   bash scripts/probe_throw/probe.sh
# It never stops at a failure: every build and every case runs on its own with a timeout.
#   A. environment: torch build, compilers, the -std torch's cpp_extension picks, sysconfig
#      flags, libstdc++/libgcc_s versions, ELF facts of libc10 and of convt2d._C, which
#      libraries provide the C++ exception runtime inside a live process
#   B. minimal probe modules (built in parallel): pybind / bare PyInit (like csrc/ops.cpp) /
#      bare + CUDA (.cu + CUDAExtension), each with torch's default -std and with the other
#      one; bare with -fcf-protection=none; bare through cpp_extension.load (no sysconfig flags)
#   C. every throw case in its own `python -c` subprocess: torch's own errors (baseline), the
#      probe modules' ops, and convt2d._C with a Cin mismatch on CPU (+ autograd,
#      inference_mode, backward op, CUDA); then a native backtrace / LD_DEBUG bindings /
#      gdb (cuda-gdb) look at the first crash.
# Output: a summary on stdout; everything in $OUT/probe_throw.log and $OUT/probe_builds.log.
# Environment knobs: OUT, PROBE_PYTHON (default python3), PROBE_BUILD_DIR, PROBE_JOBS,
#   PROBE_BUDGET_S (default 225: the gdb step is skipped when it would run past it).
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(pwd)
OUT=${OUT:-/tmp/probe_throw_out}
mkdir -p "$OUT"
LOG=$OUT/probe_throw.log
BLOG=$OUT/probe_builds.log
: >"$LOG"
: >"$BLOG"
PY=${PROBE_PYTHON:-python3}
B=${PROBE_BUILD_DIR:-/tmp/probe_throw_build}
rm -rf "$B"
mkdir -p "$B"
NPROC=$(nproc 2>/dev/null || echo 4)
JOBS=${PROBE_JOBS:-$((NPROC < 8 ? NPROC : 8))}
BUDGET=${PROBE_BUDGET_S:-225}
export PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$LOG"; }
log() { echo "$*" >>"$LOG"; }
sec() { say ""; say "===== $* ($(($(date +%s) - T0))s) ====="; }
# run a command with a timeout, output to the log only
logrun() {
  local t=$1
  shift
  log "\$ $*"
  timeout "$t" bash -c "$*" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && log "  (rc=$rc)"
  return 0
}

sec "probe_throw start: repo=$REPO python=$(command -v "$PY") OUT=$OUT builds=$B jobs=$JOBS"

# ---------------------------------------------------------------- CUDA toolkit (as setup.py)
if [ -z "${CUDA_HOME:-}" ]; then
  NVCC=$(command -v nvcc || true)
  if [ -n "$NVCC" ]; then
    REAL=""
    if [ "$(head -c 2 "$NVCC" 2>/dev/null)" = "#!" ]; then  # wrapper script
      REAL=$(grep -oE '/[^ "]*/bin/nvcc' "$NVCC" | head -1)
    fi
    { [ -n "$REAL" ] && [ -x "$REAL" ]; } || REAL=$(readlink -f "$NVCC")
    export CUDA_HOME=$(dirname "$(dirname "$REAL")")
  else
    for c in /usr/local/cuda /usr/local/cuda-*; do
      if [ -x "$c/bin/nvcc" ]; then export CUDA_HOME=$c; break; fi
    done
  fi
fi
HAVE_NVCC=0
[ -n "${CUDA_HOME:-}" ] && [ -x "${CUDA_HOME}/bin/nvcc" ] && HAVE_NVCC=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=2

# ---------------------------------------------------------------- B (start): probe builds
DEFSTD=$(timeout 60 "$PY" - <<'EOF' 2>/dev/null
import inspect, re
import torch.utils.cpp_extension as ce
src = inspect.getsource(ce)
print("c++20" if re.search(r"cpp_flag_prefix \+ 'c\+\+20'", src) else "c++17")
EOF
)
DEFSTD=${DEFSTD:-c++17}
if [ "$DEFSTD" = "c++20" ]; then ALTSTD=c++17; else ALTSTD=c++20; fi
say "torch cpp_extension default std: $DEFSTD -> alternative probed: $ALTSTD; CUDA_HOME=${CUDA_HOME:-<none>} nvcc=$HAVE_NVCC"

VARIANTS="pybind_def:pybind,pybind_alt:pybind,bare_def:bare,bare_alt:bare,bare_nocet:bare,bare_load:bare"
[ $HAVE_NVCC = 1 ] && VARIANTS="$VARIANTS,barecu_def:barecu,barecu_alt:barecu"
build_one() {  # name kind std [extra cxx flags]
  local name=$1 kind=$2 std=$3
  shift 3
  mkdir -p "$B/$name"
  local t=$(date +%s)
  (cd "$B/$name" && timeout 170 "$PY" "$HERE/setup_probe.py" "$name" "$kind" "$std" "$B/$name" "$@") \
    >"$B/$name.build.log" 2>&1
  echo "BUILD_RC=$? BUILD_SECONDS=$(($(date +%s) - t))" >>"$B/$name.build.log"
}
build_one pybind_def pybind default &
build_one pybind_alt pybind "$ALTSTD" &
build_one bare_def bare default &
build_one bare_alt bare "$ALTSTD" &
build_one bare_nocet bare default -fcf-protection=none &
(t=$(date +%s); cd "$B" && timeout 170 "$PY" "$HERE/load_probe.py" bare_load "$B/bare_load" \
  >"$B/bare_load.build.log" 2>&1; echo "BUILD_RC=$? BUILD_SECONDS=$(($(date +%s) - t))" >>"$B/bare_load.build.log") &
if [ $HAVE_NVCC = 1 ]; then
  build_one barecu_def barecu default &
  build_one barecu_alt barecu "$ALTSTD" &
fi
SHIM=""
if gcc -O1 -g -fPIC -shared "$HERE/segv_bt.c" -o "$B/segv_bt.so" >>"$BLOG" 2>&1; then SHIM=$B/segv_bt.so; fi

# ---------------------------------------------------------------- A: environment
sec "A. environment (details in $LOG)"
logrun 10 "uname -a; grep PRETTY_NAME /etc/os-release; nproc; ldd --version | head -1"
logrun 10 "for c in gcc g++ cc c++ x86_64-linux-gnu-g++; do p=\$(command -v \$c) && echo \"\$c: \$p -> \$(readlink -f \$p): \$(\$c --version | head -1)\"; done"
logrun 10 "ld --version | head -1; echo CUDA_HOME=${CUDA_HOME:-}; ${CUDA_HOME:-/nonexistent}/bin/nvcc --version | tail -2"
say "gcc: $(gcc --version 2>/dev/null | head -1) | g++: $(g++ --version 2>/dev/null | head -1) | c++ -> $(readlink -f "$(command -v c++)" 2>/dev/null)"
say "nvcc: $(${CUDA_HOME:-/nonexistent}/bin/nvcc --version 2>/dev/null | tail -1) | ld: $(ld --version 2>/dev/null | head -1)"
say "os: $(grep PRETTY_NAME /etc/os-release 2>/dev/null | cut -d= -f2) | kernel: $(uname -r) | $(ldd --version 2>/dev/null | head -1)"

SYS_STDCXX=$(readlink -f "$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)" 2>/dev/null)
SYS_GCCS=$(readlink -f "$(gcc -print-file-name=libgcc_s.so.1 2>/dev/null)" 2>/dev/null)
# .eh_frame_hdr header: version, eh_frame_ptr_enc, fde_count_enc, table_enc (ff = no binary
# search table: the unwinder falls back to a linear FDE search, cf. pytorch#117645)
ehhdr() {
  local w
  w=$(objdump -s -j .eh_frame_hdr "$1" 2>/dev/null | awk '/^ [0-9a-f]+ /{print $2; exit}')
  if [ -z "$w" ]; then echo "no .eh_frame_hdr"; elif [ "${w:6:2}" = "ff" ]; then echo "$w (NO search table!)"; else echo "$w (search table ok)"; fi
}
maxver() { strings "$1" 2>/dev/null | grep -E "^$2_[0-9.]+$" | sort -V | tail -1; }
say "system libstdc++: $SYS_STDCXX provides $(maxver "$SYS_STDCXX" GLIBCXX) / $(maxver "$SYS_STDCXX" CXXABI); libgcc_s: $SYS_GCCS"
logrun 10 "ldconfig -p | grep -E 'libstdc\+\+|libgcc_s|libunwind|libc\+\+' "

TORCH_LIB=$(timeout 60 "$PY" -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2>>"$LOG")
C10=$TORCH_LIB/libc10.so
if [ -f "$C10" ]; then
  need=$(objdump -T "$C10" 2>/dev/null | grep -oE 'GLIBCXX_[0-9.]+' | sort -uV | tail -1)
  say "libc10.so: needs up to $need; built by: $(readelf -p .comment "$C10" 2>/dev/null | grep -oE 'GCC: \([^)]*\) [0-9.]+|clang version [0-9.]+' | sort -u | tr '\n' ';')"
  logrun 20 "readelf -d '$C10' | grep -E 'NEEDED|RPATH|RUNPATH'; ldd '$C10'"
  logrun 10 "readelf -n '$C10' | grep -iE 'x86 feature|ISA|property' | head"
fi

MAIN_SO=$(ls "$REPO"/python/convt2d/_C$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null) 2>/dev/null | head -1)
if [ -n "$MAIN_SO" ] && [ -f "$MAIN_SO" ]; then
  say "convt2d._C: $MAIN_SO ($(stat -c %s "$MAIN_SO") bytes, $(date -r "$MAIN_SO" '+%F %T'))"
  say "  built by: $(readelf -p .comment "$MAIN_SO" 2>/dev/null | grep -oE 'GCC: \([^)]*\) [0-9.]+|clang version [0-9.]+' | sort -u | tr '\n' ';')"
  say "  NEEDED: $(readelf -d "$MAIN_SO" | grep NEEDED | grep -oE '\[[^]]*\]' | tr -d '[]' | tr '\n' ' ')"
  say "  GNU property: $(readelf -n "$MAIN_SO" 2>/dev/null | grep -iE 'x86 feature' | sed 's/^ *//' | tr '\n' ';')"
  say "  EH sections: $(readelf -SW "$MAIN_SO" | grep -oE '\.eh_frame_hdr|\.eh_frame|\.gcc_except_table' | sort -u | tr '\n' ' ')| eh_frame_hdr: $(ehhdr "$MAIN_SO")"
  say "  EH/unwinder symbols DEFINED in the module (expect none): $(nm -D --defined-only "$MAIN_SO" 2>/dev/null | grep -E ' (__cxa_|_Unwind_|__gxx_personality)' | awk '{print $3}' | tr '\n' ' ')"
  say "  static copies of the unwinder (nm, expect none): $(nm "$MAIN_SO" 2>/dev/null | grep -E ' [tT] (_Unwind_RaiseException|__cxa_throw|__gxx_personality_v0)' | awk '{print $3}' | tr '\n' ' ')"
  say "  needs up to $(objdump -T "$MAIN_SO" 2>/dev/null | grep -oE 'GLIBCXX_[0-9.]+' | sort -uV | tail -1)"
  logrun 20 "ldd '$MAIN_SO'"
  logrun 10 "nm -D --undefined-only '$MAIN_SO' | grep -E '__cxa_|_Unwind_|__gxx_personality|terminate|torchCheckFail|c10.*Error'"
else
  say "convt2d._C: not built for this python (python/convt2d: $(ls "$REPO"/python/convt2d/ 2>/dev/null | grep -E '\.so$' | tr '\n' ' '))"
fi
PYBIN=$(readlink -f "$("$PY" -c 'import sys; print(sys.executable)' 2>/dev/null)")
say "python binary: $PYBIN; GNU property: $(readelf -n "$PYBIN" 2>/dev/null | grep -iE 'x86 feature' | sed 's/^ *//' | tr '\n' ';')"

# flags the main build really used
NINJA=$(ls -t "$REPO"/build/temp.*/build.ninja 2>/dev/null | head -1)
if [ -n "$NINJA" ]; then
  log "--- main build: $NINJA"
  grep -E '^(cxx|nvcc|cflags|post_cflags|cuda_cflags|cuda_post_cflags|ldflags) *=' "$NINJA" >>"$LOG"
  say "main build post_cflags: $(grep -E '^post_cflags *=' "$NINJA" | cut -d= -f2- | cut -c1-300)"
fi
for bl in "${BUILD_LOG:-}" "$OUT/build.log"; do
  if [ -n "$bl" ] && [ -f "$bl" ]; then
    LINK=$(grep -E '(g\+\+|c\+\+|gcc|clang\+\+?) .*-shared' "$bl" | tail -1 | sed -E 's# [^ ]+\.o##g')
    [ -n "$LINK" ] && say "main build link line ($bl): $(echo "$LINK" | cut -c1-600)"
    say "main build log: linker/unwind warnings: $(grep -iE 'eh_frame|relocation|visibility|ABI|cet|shstk|ibt|-Wodr|lto' "$bl" | grep -v 'ABI for passing parameters' | head -5 | cut -c1-200 | tr '\n' '|')"
    break
  fi
done

# in-process facts (torch config, cpp_extension std, sysconfig, EH symbol providers)
EI_ARGS=""
[ -n "$MAIN_SO" ] && EI_ARGS="--import-main"
(cd "$REPO" && PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}" timeout 150 "$PY" "$HERE/envinfo.py" $EI_ARGS) \
  >"$B/envinfo.out" 2>&1
echo "(envinfo rc=$?)" >>"$B/envinfo.out"
cat "$B/envinfo.out" >>"$LOG"
grep -E '^SUMMARY|^torch: |^  - (GCC|clang|C\+\+ Version)|x86 thread|import convt2d failed|LDCXXSHARED|^LDSHARED|^CFLAGS' "$B/envinfo.out" | sed 's/^/  /' | cut -c1-400

# ---------------------------------------------------------------- B (finish): builds
sec "B. waiting for the probe builds"
wait
for v in ${VARIANTS//,/ }; do
  name=${v%%:*}
  f=$B/$name.build.log
  { echo "=================== $name"; cat "$f" 2>/dev/null; } >>"$BLOG"
  rcl=$(grep -oE 'BUILD_RC=[0-9]+ BUILD_SECONDS=[0-9]+' "$f" 2>/dev/null | tail -1)
  so=$(ls "$B/$name"/"$name"*.so 2>/dev/null | head -1)
  if [ -n "$so" ]; then
    say "  $name: built ($rcl) eh_frame_hdr $(ehhdr "$so") $(readelf -n "$so" 2>/dev/null | grep -iE 'x86 feature' | sed 's/^ *//' | tr '\n' ' ')"
  else
    say "  $name: NOT built ($rcl): $(grep -m1 -E 'error|Error' "$f" | cut -c1-200)"
  fi
done
CMD=$(grep -m1 -E '(c\+\+|g\+\+).* -c .*ext_probe\.cpp' "$B/bare_def.build.log" 2>/dev/null | cut -c1-700)
[ -n "$CMD" ] && log "bare_def compile line: $CMD"
LNK=$(grep -E '(g\+\+|c\+\+|gcc).* -shared' "$B/bare_def.build.log" 2>/dev/null | tail -1 | cut -c1-500)
[ -n "$LNK" ] && say "  probe (setup.py path) link line: $LNK"

# ---------------------------------------------------------------- C: cases
sec "C. throw cases (each its own python subprocess)"
DEADLINE=$((T0 + BUDGET))
(cd "$REPO" && timeout 400 "$PY" "$HERE/driver.py" --builds "$B" --repo "$REPO" --log "$LOG" \
  --jobs "$JOBS" --deadline "$DEADLINE" --shim "$SHIM" --variants "$VARIANTS")
say "(driver rc=$?)"

sec "probe_throw done; logs: $LOG $BLOG"
