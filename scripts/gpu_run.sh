#!/usr/bin/env bash
# One device call: build (TORCH_CUDA_ARCH_LIST=$ARCH, default 9.0a), correctness sweep, tests,
# benchmark, A/B and profiling steps. Logs under $OUT.
# usage: bash scripts/gpu_run.sh [quick] [check] [tests] [pytests] [ab] [envab] [sanitize] [breakdown] [bench]
#   (QUICK_K: pytest -k filter for tests/test_cuda.py; AB_ARGS, EA_ARGS, FE_ARGS, BENCH_ARGS: extra
#   args; EA_ARGS / FE_ARGS: "CONVT2D_ALGO v1;v2 [rows]", values separated by ';', e.g.
#   EA_ARGS="CONVT2D_ALGO ;fwd:implicit_gemm_mma seedA"; ab: AB_ALGOS, see scripts/ab.py)
set -uo pipefail
OUT=${OUT:-/tmp/convt2d-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python -c "import torch;print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" | tee -a "$OUT/env.txt"
t0=$(date +%s)
if ! MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=${ARCH:-9.0a} python setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  grep -E "error" "$OUT/build.log" | head -30; tail -30 "$OUT/build.log"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/python
for step in "$@"; do
  case "$step" in
    check) timeout 300 python scripts/gpu_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^$" | tail -25 ;;
    tests) timeout 400 python -m pytest -q -x -p no:cacheprovider tests 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
    quick) timeout 300 python -m pytest -q -x -rf --tb=short -p no:cacheprovider tests/test_cuda.py -k "${QUICK_K:-halo}" 2>&1 | tee "$OUT/quick.log" | tail -30 ;;
    f16err) timeout 400 python scripts/f16x3_err.py ${FE_ARGS:-CONVT2D_ALGO f16x3=on;f16x3=off} 2>&1 | tee "$OUT/f16err.log" ;;
    ncu) NCU_KERNEL=${NCU_KERNEL:-tc_halo_kernel} bash scripts/ncu_rows.sh ${NCU_ROWS:-seedA:ieee} 2>&1 | tee "$OUT/ncu.log" ;;
    envab) timeout 400 python scripts/env_ab.py ${EA_ARGS:-CONVT2D_ALGO fwd:implicit_gemm_wgmma_ws;fwd:implicit_gemm_halo} 2>&1 | tee "$OUT/envab.log" ;;
    ab) timeout 400 python scripts/ab.py ${AB_ARGS:-} 2>&1 | tee "$OUT/ab.log" ;;
    pytests) for f in tests/test_*.py; do echo "== $f"; timeout 300 python -m pytest -q -rf --tb=line -p no:cacheprovider "$f" 2>&1 | tail -4; done 2>&1 | tee "$OUT/pytests.log" ;;
    sanitize) for tool in synccheck racecheck; do echo "== $tool"; timeout 240 compute-sanitizer --tool $tool --print-limit 10 python scripts/sanitize_ws.py > "$OUT/sanitize-$tool.log" 2>&1; grep -E "rel err|SUMMARY|^========= (Error|Warning)" "$OUT/sanitize-$tool.log" | head -40; done 2>&1 | tee "$OUT/sanitize.log" ;;
    breakdown) timeout 300 python scripts/breakdown.py ${BD_ROWS:-} 2>&1 | tee "$OUT/breakdown.log" ;;
    bench) shift_args=${BENCH_ARGS:-}; timeout 400 python -m convt2d.bench --outdir "$OUT" $shift_args 2>&1 | tee "$OUT/bench.log" | tail -45 ;;
  esac
done
