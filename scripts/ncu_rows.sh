#!/usr/bin/env bash
# ncu summary of the forward kernels of some suite rows: bash scripts/ncu_rows.sh seedB:bf16 seedA:bf16
# (run after the build; writes $OUT/ncu-<row>-<dtype>.txt; NCU_KERNEL, NCU_GREP, NCU_HEAD override
# the kernel regex, the summary filter and its length)
export PYTHONPATH=$PWD/python
for rd in "$@"; do
  r=${rd%%:*}; d=${rd##*:}
  timeout 180 ncu --kernel-name regex:"${NCU_KERNEL:-tc_igemm|tc_ws|igemm|direct}" --launch-skip 0 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    python scripts/profile_rows.py "$r" "$d" > "$OUT/ncu-$r-$d.txt" 2>&1
  grep -E "${NCU_GREP:-Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Ipc|Stall|L2 Hit|Block Limit|Executed Ipc|Pipe}" "$OUT/ncu-$r-$d.txt" | head -${NCU_HEAD:-40}
done
