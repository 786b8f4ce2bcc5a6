#!/usr/bin/env bash
# Device-side checks of the tensor-core direct kernel: its tests, memcheck and racecheck
# on them (bf16), A/B against the CUDA-core kernel. Run after gpu_run.sh has built.
set -uo pipefail
OUT=${OUT:-/tmp/convt2d-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/python
timeout 200 python -m pytest -q -rf --tb=short -p no:cacheprovider tests/test_cuda.py -k "direct" 2>&1 | tee "$OUT/direct_tests.log" | tail -15
for tool in memcheck racecheck; do
  echo "== $tool"
  timeout 150 compute-sanitizer --tool $tool --print-limit 10 python -m pytest -q -x -p no:cacheprovider tests/test_cuda.py -k "direct_kernel_shapes and bf16 and nchw" > "$OUT/dtc-$tool.log" 2>&1
  grep -E "passed|failed|SUMMARY|^========= (Error|Invalid|Race|Warning)" "$OUT/dtc-$tool.log" | head -20
done
EA_DTYPES=${EA_DTYPES:-bf16,fp16} EA_PASSES=fwd timeout 200 python scripts/env_ab.py CONVT2D_DIRECT_TC 0,1 ${EA_ROWS:-seedC seedD} 2>&1 | tee "$OUT/dtc_ab.log"
