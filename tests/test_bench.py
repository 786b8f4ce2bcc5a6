"""The benchmark's config sets and reports (python -m convt2d.bench): the sweep generator, the
model zoo, --layer, and a CPU smoke run of the distribution report. Timings are not checked."""
import json

import pytest

from convt2d import bench


def test_sweep_is_valid_seeded_and_covers_the_classes():
    cfgs = bench.sweep_configs(300, 11)
    assert len(cfgs) == 300 and all(c.valid() for c in cfgs)
    assert [c.describe() for c in bench.sweep_configs(20, 11)] == [c.describe() for c in cfgs[:20]]
    assert [c.describe() for c in bench.sweep_configs(20, 12)] != [c.describe() for c in cfgs[:20]]
    for c in cfgs:
        n = c.numels()
        assert 1e6 <= c.fwd_flops() <= 2e11 and 4 * max(n["x"], n["out"], n["w"]) <= 512 * 2 ** 20
    classes = {
        "depthwise": [c for c in cfgs if c.groups == c.Cin == c.Cout and c.groups > 1],
        "grouped": [c for c in cfgs if 1 < c.groups < c.Cin],
        "few outputs": [c for c in cfgs if c.Cout <= 8],
        "few inputs": [c for c in cfgs if c.Cin <= 4],
        "tiny spatial": [c for c in cfgs if c.H * c.W <= 16],
        "1x1 kernel": [c for c in cfgs if c.k == (1, 1)],
        "large kernel or stride": [c for c in cfgs if max(c.k) >= 9 or max(c.stride) >= 4],
        "channels_last": [c for c in cfgs if c.channels_last],
        "batch 1": [c for c in cfgs if c.N == 1],
        "dilation 2": [c for c in cfgs if max(c.dilation) == 2],
        "odd channels": [c for c in cfgs if c.Cin % 8 or c.Cout % 8],
    }
    empty = [k for k, v in classes.items() if not v]
    assert not empty, f"the sweep never draws: {empty}"


def test_models_are_valid_and_sourced():
    assert len(bench.MODELS) >= 20
    for m in bench.MODELS:
        assert m.valid(), m.describe()
        assert m.source, m.name
    assert len({m.name for m in bench.MODELS}) == len(bench.MODELS)


def test_layer_round_trip():
    for c in bench.sweep_configs(30, 5):
        assert bench.parse_layer(c.layer_string()).describe() == c.describe()
    c = bench.parse_layer("8,1024,512,4,8,8,2,1")
    assert (c.N, c.Cin, c.Cout, c.k, c.H, c.stride, c.padding) == (8, 1024, 512, (4, 4), 8,
                                                                     (2, 2), (1, 1))
    with pytest.raises(SystemExit):
        bench.parse_layer("1,2,3")
    with pytest.raises(SystemExit):
        bench.parse_layer("1,4,6,3,5,5,1,0,0,4")  # groups 4 does not divide Cout 6


def test_cpu_sweep_reports_the_distribution(tmp_path):
    rc = bench.main(["--cpu", "--quick", "--sweep", "3", "--seed", "2", "--dtypes", "fp32",
                     "--passes", "fwd", "--threads", "1", "--cpu-gflop", "0.01",
                     "--no-png", "--no-measure-peaks", "--outdir", str(tmp_path)])
    assert rc == 0
    out = json.loads((tmp_path / "bench_results.json").read_text())
    assert len(out["rows"]) == 3 and all(r["err"] is not None and r["err"] < 1e-4
                                         for r in out["rows"])
    # what convt2d ran is recorded for GPU rows only (the planner's record is process-wide)
    assert all("algos" not in r for r in out["rows"])
    d = out["distribution"]
    assert len(d) == 1 and d[0]["n"] == 3 and len(d[0]["worst"]) == 3
    md = (tmp_path / "bench_results.md").read_text()
    assert "Distribution" in md and "By shape class" in md
    classes = out["classes"]
    assert sum(c["n"] for c in classes) == 3
    assert {c["class"] for c in classes} <= set(bench.SHAPE_CLASSES)


def test_pass_algorithms():
    rec = {"fwd": "narrow_output", "bwd": "strided", "dgrad": "direct", "wgrad": "tensorop"}
    assert bench.pass_algorithms(rec, "fwd") == {"fwd": "narrow_output"}
    assert bench.pass_algorithms(rec, "bwd") == {"bwd": "strided", "dgrad": "direct",
                                                 "wgrad": "tensorop"}
    assert bench.pass_algorithms(rec, "fwdbwd") == rec
    assert bench.pass_algorithms(rec, "fwdbwd-tuned") == rec
    assert bench.pass_algorithms({}, "bwd") == {}


def test_ran_string():
    assert bench.ran_string({"algos": {"fwd": "gemm_col2im"}}) == "gemm_col2im"
    assert bench.ran_string({"algos": {"bwd": "tap_gather", "dgrad": "implicit_gemm",
                                       "wgrad": "tensorop"}}) == \
        "tap_gather: implicit_gemm / tensorop"
    assert bench.ran_string({"algos": {"wgrad": "direct"}}) == "direct"
    assert bench.ran_string({}) == ""


def test_shape_classes():
    """Each class of the breakdown, first match wins."""
    C = bench.Config
    cases = [
        (C("a", 2, 64, 64, 4, 16, stride=2, padding=1, groups=64), "depthwise"),
        (C("b", 2, 64, 128, 4, 16, stride=2, padding=1, groups=16), "grouped, <= 8 a group"),
        (C("c", 2, 64, 32, 1, 16), "dense GEMM"),
        (C("d", 2, 512, 256, 4, 1, stride=2), "dense GEMM"),
        (C("e", 2, 64, 32, 2, 16, stride=2), "dense GEMM"),
        (C("f", 2, 128, 3, 4, 32, stride=2, padding=1), "1-8 outputs"),
        (C("g", 2, 3, 64, 4, 32, stride=2, padding=1), "1-4 inputs"),
        (C("h", 8, 1024, 512, 4, 4, stride=2, padding=1), "tiny spatial"),
        (C("i", 2, 64, 64, 9, 16, stride=3, padding=4), "large kernel / stride"),
        (C("j", 2, 64, 64, 3, 16, stride=1, padding=1), "other"),
    ]
    for cfg, want in cases:
        assert bench.shape_class(cfg) == want, (cfg.describe(), want)


def test_cpu_host_overhead_report(tmp_path):
    rc = bench.main(["--cpu", "--quick", "--host", "--configs", "unet", "--dtypes", "fp32",
                     "--passes", "fwd", "--threads", "1", "--cpu-gflop", "0.01", "--no-png",
                     "--no-measure-peaks", "--outdir", str(tmp_path)])
    assert rc == 0
    out = json.loads((tmp_path / "bench_results.json").read_text())
    host = out["host"]
    assert len(host) == 2 * len(bench.HOST_LAYERS)
    assert all(r["torch_us"] > 0 and r["convt2d_us"] > 0 for r in host)
    assert "Per-call time" in (tmp_path / "bench_results.md").read_text()
