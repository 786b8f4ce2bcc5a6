"""Pure-Python port of direct2_fwd_kernel's index mapping (csrc/cuda/direct.cu), checked
against torch's conv_transpose2d on the CPU. No GPU needed; small shapes only.
Checks that every output element is written exactly once, with the right value."""
import math
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F

import os
KCMAX = int(os.environ.get("KCMAX", "16"))
PY, BUDGET, SMAX, MAXSW = int(os.environ.get("PY", "2")), 100 * 1024, 160 * 1024, 16


def floor_div(a, b):
    return a // b


def phase(r, s, p, d, k, out):
    q0 = floor_div(p - r + s - 1, s)
    q_end = floor_div(out - 1 + p - r, s)
    nq = q_end - q0 + 1 if q_end >= q0 else 0
    kstep = s // math.gcd(s, d)
    k0 = -1
    for kk in range(min(k, kstep)):
        if (kk * d) % s == r:
            k0 = kk
            break
    if k0 < 0:
        ntap, k0 = 0, 0
    else:
        ntap = (k - 1 - k0) // kstep + 1
    koff0 = (k0 * d - r) // s  # exact (C++ truncation; k0*d - r >= 0 here? check below)
    assert (k0 * d - r) % s == 0 or ntap == 0
    if k0 * d - r < 0:  # C++ truncates toward zero
        koff0 = -((r - k0 * d) // s)
    koff_step = kstep * d // s
    return dict(q0=q0, nq=nq, k0=k0, kstep=kstep, ntap=ntap, koff0=koff0, koff_step=koff_step)


def config(P, kC, acc_b, t_b):
    sw = P["sw"]
    if sw > MAXSW or P["sh"] > MAXSW:
        return None
    pad = 1 if sw % 2 == 0 else 0
    ld = 33 * sw if pad else 32 * sw
    cig = P["Cin"] // P["G"]
    w_bytes = ((cig * P["kh"] * P["kw"] * kC + kC) * acc_b + 15) // 16 * 16
    fixed = w_bytes
    row_bytes = kC * ld * t_b
    max_nq = max(phase(r, P["sh"], P["ph"], P["dh"], P["kh"], P["Ho"])["nq"] for r in range(P["sh"]))
    rg = max(2, (4 + sw - 1) // sw)
    rg_rows = (max_nq + PY - 1) // PY
    if rg > rg_rows:
        rg = rg_rows if rg_rows > 0 else 1
    while rg > 1 and fixed + rg * PY * row_bytes > BUDGET:
        rg -= 1
    smem = fixed + rg * PY * row_bytes
    if smem > SMAX:
        return None
    cfg = dict(pad=pad, ld=ld, qy_tile=rg * PY, qx_first=P["pw"] // sw)
    ox_first = cfg["qx_first"] * sw - P["pw"]
    cfg["ntx"] = (P["Wo"] - ox_first + 32 * sw - 1) // (32 * sw)
    cfg["nty"] = (max_nq + cfg["qy_tile"] - 1) // cfg["qy_tile"] if max_nq > 0 else 1
    return cfg, smem


def run(P, x, w, b, kC):
    N, Cin, H, W = x.shape
    G, sh, sw = P["G"], P["sh"], P["sw"]
    Cig, Cog = Cin // G, w.shape[1]
    res = config(P, kC, 4, 4)
    if res is None:
        return None
    cfg, smem = res
    QY = cfg["qy_tile"]
    out = np.full((N, Cog * G, P["Ho"], P["Wo"]), np.nan)
    cnt = np.zeros(out.shape, dtype=np.int64)
    gx = cfg["ntx"] * cfg["nty"] * sh
    ncob = (Cog + kC - 1) // kC
    xps = [phase(r, sw, P["pw"], P["dw"], P["kw"], P["Wo"]) for r in range(sw)]
    kstep_x = sw // math.gcd(sw, P["dw"])
    koffs_x = kstep_x * P["dw"] // sw
    for bx in range(gx):
        tx = bx % cfg["ntx"]; rest = bx // cfg["ntx"]
        ty = rest % cfg["nty"]; ry = rest // cfg["nty"]
        dy = phase(ry, sh, P["ph"], P["dh"], P["kh"], P["Ho"])
        qy0 = dy["q0"] + ty * QY
        rows_left = dy["q0"] + dy["nq"] - qy0
        if rows_left <= 0:
            continue
        nrows = min(rows_left, QY)
        qx0 = cfg["qx_first"] + tx * 32
        ox_base = qx0 * sw - P["pw"]
        tw = 32 * sw
        col_lo = -ox_base if ox_base < 0 else 0
        col_hi = min(tw, P["Wo"] - ox_base)
        for z in range(N * G * ncob):
            cob = z % ncob; g = (z // ncob) % G; n = z // (ncob * G)
            co0 = cob * kC
            nc = min(kC, Cog - co0)
            wk = np.zeros((P["kh"], P["kw"], Cig, kC))
            wk[:, :, :, :nc] = w[g * Cig:(g + 1) * Cig, co0:co0 + nc].transpose(2, 3, 0, 1)
            sb = np.zeros(kC)
            if b is not None:
                sb[:nc] = b[g * Cog + co0: g * Cog + co0 + nc]
            if dy["ntap"] == 0:  # fast path: bias / zero rows
                for c in range(nc):
                    for i in range(nrows):
                        oy = (qy0 + i) * sh + ry - P["ph"]
                        for cc in range(col_lo, col_hi):
                            out[n, g * Cog + co0 + c, oy, ox_base + cc] = sb[c]
                            cnt[n, g * Cog + co0 + c, oy, ox_base + cc] += 1
                continue
            stage = np.full((kC, QY, cfg["ld"]), np.nan)
            nunits = sw * (QY // PY)
            for u in range(nunits):
                rx = u % sw; row0 = (u // sw) * PY
                if row0 >= nrows:
                    continue
                xp = xps[rx]
                for lane in range(32):
                    Q = qx0 + lane
                    acc = np.zeros((PY, kC))
                    for jy in range(dy["ntap"]):
                        ky = dy["k0"] + jy * dy["kstep"]
                        for r in range(PY):
                            iy = qy0 + row0 + r - dy["koff0"] - jy * dy["koff_step"]
                            rv = row0 + r < nrows and 0 <= iy < H
                            for jx in range(xp["ntap"]):
                                kx = xp["k0"] + jx * kstep_x
                                ix = Q - xp["koff0"] - jx * koffs_x
                                if rv and 0 <= ix < W:
                                    acc[r] += x[n, g * Cig:(g + 1) * Cig, iy, ix] @ wk[ky, kx]
                    col = lane * sw + rx
                    colp = col + (col >> 5 if cfg["pad"] else 0)
                    for r in range(PY):
                        if row0 + r < nrows:
                            stage[:, row0 + r, colp] = acc[r] + sb
            for c in range(nc):
                for i in range(nrows):
                    oy = (qy0 + i) * sh + ry - P["ph"]
                    for cc in range(col_lo, col_hi):
                        v = stage[c, i, cc + (cc >> 5 if cfg["pad"] else 0)]
                        out[n, g * Cog + co0 + c, oy, ox_base + cc] = v
                        cnt[n, g * Cog + co0 + c, oy, ox_base + cc] += 1
    return out, cnt, cfg, smem


def main():
    rnd = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    ntests = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    fixed = [dict(N=1, Cin=8, Cout=16, G=4, kh=3, kw=5, H=5, W=40, sh=2, sw=3, ph=1, pw=2, oph=0, opw=0, dh=2, dw=1),
             dict(N=1, Cin=4, Cout=20, G=1, kh=3, kw=3, H=4, W=9, sh=5, sw=5, ph=1, pw=1, oph=0, opw=0, dh=2, dw=2),
             dict(N=1, Cin=2, Cout=3, G=1, kh=2, kw=2, H=3, W=20, sh=2, sw=2, ph=0, pw=0, oph=1, opw=1, dh=1, dw=1)]
    cfgs = list(fixed)
    while len(cfgs) < ntests:
        G = rnd.choice([1, 2, 3])
        P = dict(N=rnd.randint(1, 2), G=G, Cin=G * rnd.randint(1, 5), Cout=G * rnd.choice([1, 3, 5, 8, 9, 17]),
                 kh=rnd.randint(1, 5), kw=rnd.randint(1, 5), H=rnd.randint(1, 7), W=rnd.randint(1, 40),
                 sh=rnd.randint(1, 6), sw=rnd.choice([1, 2, 3, 4, 5, 6, 8, 11]),
                 dh=rnd.randint(1, 3), dw=rnd.randint(1, 3))
        P["ph"] = rnd.randint(0, P["dh"] * (P["kh"] - 1) + 1)
        P["pw"] = rnd.randint(0, P["dw"] * (P["kw"] - 1) + 1)
        P["oph"] = rnd.randint(0, max(P["sh"], P["dh"]) - 1)
        P["opw"] = rnd.randint(0, max(P["sw"], P["dw"]) - 1)
        cfgs.append(P)
    bad = 0
    for P in cfgs:
        P["Ho"] = (P["H"] - 1) * P["sh"] - 2 * P["ph"] + P["dh"] * (P["kh"] - 1) + P["oph"] + 1
        P["Wo"] = (P["W"] - 1) * P["sw"] - 2 * P["pw"] + P["dw"] * (P["kw"] - 1) + P["opw"] + 1
        if P["Ho"] <= 0 or P["Wo"] <= 0:
            continue
        x = torch.randn(P["N"], P["Cin"], P["H"], P["W"], dtype=torch.float64)
        w = torch.randn(P["Cin"], P["Cout"] // P["G"], P["kh"], P["kw"], dtype=torch.float64)
        b = torch.randn(P["Cout"], dtype=torch.float64) if rnd.random() < 0.5 else None
        ref = F.conv_transpose2d(x, w, b, (P["sh"], P["sw"]), (P["ph"], P["pw"]), (P["oph"], P["opw"]),
                                 P["G"], (P["dh"], P["dw"])).numpy()
        cog = P["Cout"] // P["G"]
        kC = 4 if cog <= 4 else 8 if (cog <= 8 or KCMAX == 8) else 16
        r = run(P, x.numpy(), w.numpy(), None if b is None else b.numpy(), kC)
        if r is None:
            print("fallback", P)
            continue
        out, cnt, cfg, smem = r
        ok = (cnt == 1).all() and np.allclose(out, ref, atol=1e-9)
        bad += not ok
        print("OK " if ok else "BAD", {k: P[k] for k in P}, "qy", cfg["qy_tile"], "ntx", cfg["ntx"],
              "nty", cfg["nty"], "smem", smem, "" if ok else f"cnt!=1:{(cnt != 1).sum()} err:{np.nanmax(np.abs(out - ref))}")
    print("bad", bad)


if __name__ == "__main__":
    main()
