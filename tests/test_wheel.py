"""The wheel, end to end: build it with scripts/build_wheel.sh, install it into a
fresh virtual environment and use it from outside the repository.

Slow (a full compile of the extension), so skipped unless CONVT2D_TEST_WHEEL=1:

    CONVT2D_TEST_WHEEL=1 python -m pytest -q tests/test_wheel.py

The wheel is CPU-only (scripts/build_wheel.sh --cpu) unless CONVT2D_TEST_WHEEL_CUDA=1,
which builds a CUDA wheel for TORCH_CUDA_ARCH_LIST (default here: 9.0a only, to keep the
test short; scripts/build_wheel.sh alone builds the wheels' full list).
The fresh venv sees this interpreter's torch (--system-site-packages, plus this
environment's site-packages when the tests themselves run in a venv), so torch is
not installed again; the wheel is installed with --no-deps --no-index.
"""
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.environ.get("CONVT2D_TEST_WHEEL") != "1",
    reason="slow (builds the wheel): set CONVT2D_TEST_WHEEL=1 to run",
)

CUDA_WHEEL = os.environ.get("CONVT2D_TEST_WHEEL_CUDA") == "1"

# Runs in the fresh venv, from a temp folder: the installed wheel, not the repo.
CHECK = r'''
import json, os, sys
import torch
import torch.nn.functional as F
import convt2d

expected_prefix = sys.argv[1]
where = os.path.realpath(convt2d.__file__)
assert where.startswith(os.path.realpath(expected_prefix) + os.sep), (
    f"convt2d imported from {where}, not from the venv {expected_prefix}")

torch.manual_seed(0)
devices = ["cpu"]
if torch.cuda.is_available() and convt2d.cuda_available():
    devices.append("cuda")
report = {"version": convt2d.__version__, "file": where, "devices": devices,
          "cuda_kernels": convt2d.cuda_available()}
for dev in devices:
    kw = dict(stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2, dilation=(1, 2))
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64, device=dev, requires_grad=True)
    w = torch.randn(4, 3, 3, 2, dtype=torch.float64, device=dev, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, device=dev, requires_grad=True)
    y = convt2d.conv_transpose2d(x, w, b, **kw)
    y_ref = F.conv_transpose2d(x, w, b, **kw)
    assert y.shape == y_ref.shape, (dev, y.shape, y_ref.shape)
    torch.testing.assert_close(y, y_ref)
    g = torch.randn_like(y_ref)
    grads = torch.autograd.grad(y, (x, w, b), g)
    grads_ref = torch.autograd.grad(y_ref, (x, w, b), g)
    for name, a, r in zip("xwb", grads, grads_ref):
        torch.testing.assert_close(a, r, msg=lambda m: f"{dev} grad {name}: {m}")
    # the module drop-in too
    m = convt2d.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2).to(dev, torch.float64)
    ref = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2).to(dev, torch.float64)
    ref.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x.detach()), ref(x.detach()))
print("CONVT2D_WHEEL_CHECK " + json.dumps(report))
'''


def _run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode != 0:
        pytest.fail(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n"
                    f"{r.stdout[-20000:]}", pytrace=False)
    return r.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse")
    cmd = ["bash", ROOT / "scripts" / "build_wheel.sh", "--out", out, "--python", sys.executable]
    env = dict(os.environ)
    if CUDA_WHEEL:
        env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    else:
        cmd.append("--cpu")
    env.setdefault("MAX_JOBS", "2")
    log = _run(cmd, env=env, cwd=ROOT)
    print(log[-3000:])
    wheels = sorted(out.glob("convt2d-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {out}, found {wheels}"
    return wheels[0]


def test_wheel_metadata(wheel):
    name = wheel.name
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert f"-{py}-{py}-" in name, name
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    kind = "cpu" if not CUDA_WHEEL else "cu"
    assert f"+{kind}" in name and f".torch{major}.{minor}-" in name, (
        f"the label should name the build and the torch minor: {name}")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    assert any(n.startswith("convt2d/_C.") and n.endswith(".so") for n in names), names
    for f in ("__init__.py", "functional.py", "modules.py", "_ops.py", "_build_info.py"):
        assert f"convt2d/{f}" in names, f"convt2d/{f} missing from the wheel: {names}"
    # never a pin: installing the wheel must not replace the user's torch (the import checks
    # the torch minor instead)
    reqs = [l for l in text.splitlines() if l.startswith("Requires-Dist: torch")]
    assert reqs == ["Requires-Dist: torch>=2.4"], reqs


def test_wheel_installs_and_runs(wheel, tmp_path):
    venv_dir = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv_dir])
    vpy = venv_dir / "bin" / "python"
    # In a venv, --system-site-packages exposes the *base* interpreter's
    # site-packages, not this environment's (where torch is): add ours after
    # the new venv's own (a .pth line; .pth files found there are not run, so
    # an editable convt2d installed here stays invisible).
    vsite = _run([vpy, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip()
    ours = []
    for key in ("purelib", "platlib"):
        p = sysconfig.get_path(key)
        if p not in ours and os.path.realpath(p) != os.path.realpath(vsite):
            ours.append(p)
    Path(vsite, "zz_convt2d_test_parent_env.pth").write_text("\n".join(ours) + "\n")

    _run([vpy, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", wheel])
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = _run([vpy, "-c", CHECK, venv_dir], cwd=work, env=env)
    line = next((s for s in out.splitlines() if s.startswith("CONVT2D_WHEEL_CHECK ")), None)
    assert line, out
    report = json.loads(line.split(" ", 1)[1])
    print(report)
    if CUDA_WHEEL:
        assert report["cuda_kernels"], "a CUDA wheel must register CUDA kernels"
