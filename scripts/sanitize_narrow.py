"""The narrow kernel (narrow.cu) forced on odd shapes, every K split, for compute-sanitizer
(no profiler: CUPTI is taken by the sanitizer). Prints the max relative error per case:
python scripts/sanitize_narrow.py  (under: compute-sanitizer --tool memcheck|racecheck ...)"""
import os

import torch
import torch.nn.functional as F

import convt2d  # noqa: F401

os.environ["CONVT2D_KERNEL"] = "narrow"
# (N, Cin, Cout, H, W, k, stride, padding, output_padding, dilation, groups)
CFGS = [
    (2, 64, 3, 8, 8, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),
    (3, 40, 1, 7, 9, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),
    (2, 24, 2, 5, 37, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    (2, 30, 8, 6, 6, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1),
    (1, 20, 5, 9, 11, (5, 5), (1, 1), (2, 2), (0, 0), (1, 1), 1),
    (2, 16, 6, 5, 7, (3, 5), (2, 3), (1, 2), (0, 0), (2, 1), 2),
    (2, 36, 3, 5, 5, (1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1),
    (1, 9, 7, 70, 3, (2, 3), (1, 2), (0, 1), (0, 0), (1, 1), 1),
]
worst = 0.0
for n, cin, cout, h, w_, k, s, p, op, d, g in CFGS:
    for dt in (torch.float32, torch.bfloat16):
        for layout in ("nchw", "channels_last"):
            for wp in ("8", "4", "2", "1"):
                os.environ["CONVT2D_NW_WP"] = wp
                x = torch.randn(n, cin, h, w_, device="cuda").to(dt)
                if layout == "channels_last":
                    x = x.contiguous(memory_format=torch.channels_last)
                wt = torch.randn(cin, cout // g, *k, device="cuda").to(dt)
                b = torch.randn(cout, device="cuda").to(dt)
                out = convt2d.forward(x, wt, b, s, p, op, g, d)
                ref = F.conv_transpose2d(x.double().cpu(), wt.double().cpu(), b.double().cpu(),
                                         s, p, op, g, d)
                err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
                worst = max(worst, err if dt == torch.float32 else err / 100)
                assert err < (1e-5 if dt == torch.float32 else 3e-2), (n, cin, cout, dt, wp, err)
torch.cuda.synchronize()
print(f"sanitize_narrow: {len(CFGS) * 16} cases ok, worst fp32-scaled rel err {worst:.2e}")
