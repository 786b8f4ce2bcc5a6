#!/usr/bin/env bash
# Per-CUDA-line instruction counts and stall samples of one kernel (ncu source page):
# bash scripts/ncu_src.sh <kernel regex> <row> <dtype>  -> $OUT/src-<row>.csv
export PYTHONPATH=$PWD/python
k=$1; r=$2; d=$3
timeout 150 ncu --kernel-name regex:"$k" --launch-count 1 --section SourceCounters --section WarpStateStats \
  --import-source yes -o "$OUT/src-$r" python scripts/profile_rows.py "$r" "$d" > "$OUT/src-$r.log" 2>&1
ncu -i "$OUT/src-$r.ncu-rep" --page source --csv --print-source cuda > "$OUT/src-$r.csv" 2>&1
ncu -i "$OUT/src-$r.ncu-rep" --page source --csv --print-source sass > "$OUT/sass-$r.csv" 2>&1
rm -f "$OUT/src-$r.ncu-rep"
head -c 600 "$OUT/src-$r.csv"; echo; wc -l "$OUT/src-$r.csv" "$OUT/sass-$r.csv"
