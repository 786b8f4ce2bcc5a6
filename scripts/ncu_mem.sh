#!/usr/bin/env bash
# Per-kernel time and DRAM/L2 traffic of one suite row's forward: bash scripts/ncu_mem.sh unet:bf16 ...
export PYTHONPATH=$PWD/python
M=gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio
for rd in "$@"; do
  r=${rd%%:*}; d=${rd##*:}
  echo "=== $r $d"
  timeout 180 ncu --launch-skip 0 --launch-count 12 --metrics $M --csv python scripts/profile_rows.py "$r" "$d" 2>/dev/null \
    | python scripts/ncu_csv.py
done
