export PYTHONPATH=$PWD/python
for r in seedC seedD; do
timeout 120 ncu --kernel-name regex:"direct_tc" --launch-skip 0 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters \
  python scripts/profile_rows.py $r bf16 > "$OUT/ncu-dtc-$r.txt" 2>&1
grep -E "Duration|DRAM Throughput|Issued Ipc|Achieved Occupancy|Registers|Warp Cycles Per Issued|Executed Instructions  |Shared.*Conflict|Bank" "$OUT/ncu-dtc-$r.txt" | head -20
done
