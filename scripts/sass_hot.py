"""Summarise an ncu SASS source page (scripts/ncu_src.sh's sass-<row>.csv): total stall samples,
the top stall reasons, samples per block of 100 instructions, and the hottest instructions.
usage: python scripts/sass_hot.py sass.csv [top]"""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
h = rows[1]
data = rows[2:]
i_s = h.index("Warp Stall Sampling (All Samples)")
i_e = h.index("Instructions Executed")
st = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
total = sum(int(r[i_s]) for r in data)
execd = sum(int(r[i_e] or 0) for r in data)
print(f"instructions {len(data)}  samples {total}  warp instructions executed {execd}")
agg = {}
for r in data:
    for i in st:
        agg[h[i]] = agg.get(h[i], 0) + int(r[i])
print("reasons:", ", ".join(f"{k[6:]} {v / total:.1%}" for v, k in
                            sorted(((v, k) for k, v in agg.items()), reverse=True)[:10]))
blocks = {}
for n, r in enumerate(data):
    blocks[n // 100] = blocks.get(n // 100, (0, 0))
    s, e = blocks[n // 100]
    blocks[n // 100] = (s + int(r[i_s]), e + int(r[i_e] or 0))
print("block  samples  executed")
for b, (s, e) in sorted(blocks.items()):
    if s > total * 0.004:
        print(f"{b * 100:5d} {s:8d} {e:10d}")
print("hottest:")
for n, r in sorted(enumerate(data), key=lambda x: -int(x[1][i_s]))[:top_n]:
    t = sorted(((int(r[i]), h[i][6:]) for i in st), reverse=True)[:2]
    print(f"{n:5d} {int(r[i_s]):7d} {int(r[i_e] or 0):10d} {r[1].strip()[:58]:58s} {t}")
