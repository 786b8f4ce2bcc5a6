"""Print `ncu --csv --metrics ...` output (stdin) grouped by kernel launch, stall metric names shortened."""
import csv
import sys

rows = [r for r in csv.reader(line for line in sys.stdin if line.startswith('"'))]
if rows:
    h = rows[0]
    ki, mi, vi, ii = (h.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value", "ID"))
    cur = None
    for r in rows[1:]:
        if r[ii] != cur:
            cur = r[ii]
            print("--", r[ki][:90])
        name = r[mi].replace("smsp__average_warps_issue_stalled_", "stall_")
        print("   ", name.replace("_per_issue_active.ratio", ""), r[vi])
