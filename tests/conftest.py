"""Shared helpers for the convt2d test suite.

Every numerical check compares convt2d against torch's own conv_transpose2d run in float64 on
copies of the *same* (already rounded) inputs, by the relative Frobenius error
``||out - ref|| / ||ref||``, with a per-dtype tolerance (see ``tolerance``).

References are computed on the CPU, except for the full-size benchmark shapes on CUDA, where
a float64 CPU reference would take minutes: there the reference is torch's conv_transpose2d
on float64 CUDA tensors (``ref_device="cuda"``), which is still float64 arithmetic and
independent of convt2d.

Outputs must be fully written by the kernels: on CUDA the caching allocator is filled with NaN
bytes right before each call (``poison``); on the CPU each call is preceded by freeing a
poisoned block of the output's size (glibc usually hands it back), once with NaN and once with
a large finite value, and the two runs must agree bitwise.

Layout of the suite:
  conftest.py            helpers (this file), markers, per-test seeding
  test_shapes.py         the benchmark-suite shapes (scaled down on the CPU, full size on CUDA)
  test_grid.py           parametrised grid over stride/padding/dilation/groups/kernels/sizes
  test_hypothesis.py     hypothesis-generated valid configurations
  test_layouts.py        memory formats, views, unbatched, zero batch, dtypes, grad masks
  test_autograd.py       gradcheck, torch.library.opcheck
  test_compile.py        torch.compile (fullgraph) and torch.export
  test_modules.py        convt2d.ConvTranspose2d, convert(), state_dict, autocast
  test_errors.py         bad input: same exception type and message as torch
  test_algo.py           CONVT2D_ALGO: parsing, errors, the CPU kernels forced
  test_cuda.py           CUDA only: devices, streams, graphs, determinism, TF32, large index;
                         every CUDA algorithm forced through CONVT2D_ALGO
  test_training.py       100-step DCGAN / U-Net training tracks nn.ConvTranspose2d (CPU, CUDA)
  test_process.py        whole processes: clean exit, mismatched installs, thread-creation failure
  test_info.py           convt2d.info(), the autotune counters and log
  test_distributed.py    DistributedDataParallel on 2 GPUs, a tensor on cuda:1
  test_bench.py          the benchmark's generators and report (CPU)
  test_wheel.py          the wheel (slow, opt-in: CONVT2D_TEST_WHEEL=1)
"""
import math
import zlib
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

import pytest
import torch
import torch.nn.functional as F

import convt2d

HAS_CUDA = torch.cuda.is_available()

try:  # hypothesis is a test dependency; the suite still runs (minus those tests) without it
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "convt2d", deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture])
    settings.load_profile("convt2d")
except ImportError:  # pragma: no cover
    pass


# --------------------------------------------------------------------------- pytest plumbing

def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: long-running test (large tensors)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed(request):
    """A fresh but reproducible seed per test, derived from the test id (incl. parameters)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    yield seed


@pytest.fixture(autouse=True)
def _restore_global_flags():
    """Tests may flip global flags; make sure none leaks into the next test."""
    det = torch.are_deterministic_algorithms_enabled()
    tf32 = torch.backends.cudnn.allow_tf32
    yield
    torch.use_deterministic_algorithms(det)
    torch.backends.cudnn.allow_tf32 = tf32


# `device` parameter lists: CUDA entries carry the cuda marker, so they skip without a GPU.
CUDA = pytest.param("cuda", marks=pytest.mark.cuda, id="cuda")
DEVICES = ["cpu", CUDA]

CPU_DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
CUDA_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def dtype_id(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


# ------------------------------------------------------------------------------ tolerances

def tolerance(dtype: torch.dtype, device) -> float:
    """Relative Frobenius-error tolerance for results computed in `dtype` on `device`.

    float32 on CUDA depends on torch.backends.cudnn.allow_tf32 *at call time*."""
    device = torch.device(device)
    if dtype == torch.float64:
        return 1e-10
    if dtype == torch.float32:
        if device.type == "cuda" and torch.backends.cudnn.allow_tf32:
            return 5e-3
        return 1e-5
    if dtype == torch.float16:
        return 5e-3
    if dtype == torch.bfloat16:
        return 3e-2
    raise AssertionError(f"no tolerance for {dtype}")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F, computed in float64 on ref's device (absolute if ref == 0)."""
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    if r.numel() == 0:
        return 0.0
    num = torch.linalg.vector_norm(o - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / den if den > 0 else num


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, device,
                 what: str = "output", tol: Optional[float] = None):
    assert isinstance(out, torch.Tensor), f"{what}: got {type(out)}"
    assert tuple(out.shape) == tuple(ref.shape), \
        f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert out.dtype == dtype, f"{what}: dtype {out.dtype} != {dtype}"
    assert out.device == torch.device(device) or (
        torch.device(device).index is None and out.device.type == torch.device(device).type), \
        f"{what}: device {out.device} != {device}"
    nan = torch.isnan(out).sum().item()
    assert nan == 0, f"{what}: {nan} NaN values out of {out.numel()} (unwritten output?)"
    tol = tolerance(dtype, device) if tol is None else tol
    err = rel_err(out, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > tolerance {tol:.1e}"


# ---------------------------------------------------------------------------- configurations

def _pair(v) -> Tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(e) for e in v)
    return v if len(v) == 2 else (v[0], v[0])


@dataclass(frozen=True)
class Cfg:
    """One conv_transpose2d problem (batched). Scalars may be given for 2-tuples."""
    N: int
    Cin: int
    Cout: int
    H: int
    W: int
    k: Tuple[int, int] = (3, 3)
    stride: Tuple[int, int] = (1, 1)
    padding: Tuple[int, int] = (0, 0)
    output_padding: Tuple[int, int] = (0, 0)
    dilation: Tuple[int, int] = (1, 1)
    groups: int = 1
    bias: bool = True
    name: str = field(default="", compare=False)

    def __post_init__(self):
        for f in ("k", "stride", "padding", "output_padding", "dilation"):
            object.__setattr__(self, f, _pair(getattr(self, f)))

    # ------------------------------------------------------------------ derived
    def out_hw(self) -> Tuple[int, int]:
        (kh, kw), (sh, sw), (ph, pw) = self.k, self.stride, self.padding
        (oph, opw), (dh, dw) = self.output_padding, self.dilation
        return ((self.H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1,
                (self.W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1)

    def valid(self) -> bool:
        ho, wo = self.out_hw()
        ok_op = all((op < s or op < d) for op, s, d in
                    zip(self.output_padding, self.stride, self.dilation))
        return (ho > 0 and wo > 0 and ok_op and self.groups > 0
                and self.Cin % self.groups == 0 and self.Cout % self.groups == 0
                and min(self.stride) > 0 and min(self.dilation) > 0
                and min(self.padding) >= 0 and min(self.output_padding) >= 0)

    def kwargs(self) -> dict:
        return dict(stride=self.stride, padding=self.padding, output_padding=self.output_padding,
                    groups=self.groups, dilation=self.dilation)

    def out_shape(self):
        return (self.N, self.Cout) + self.out_hw()

    def id(self) -> str:
        if self.name:
            return self.name
        s = f"N{self.N}_{self.Cin}to{self.Cout}_{self.H}x{self.W}_k{self.k[0]}x{self.k[1]}"
        for tag, v, dflt in (("s", self.stride, (1, 1)), ("p", self.padding, (0, 0)),
                             ("op", self.output_padding, (0, 0)), ("d", self.dilation, (1, 1))):
            if v != dflt:
                s += f"_{tag}{v[0]}x{v[1]}"
        if self.groups != 1:
            s += f"_g{self.groups}"
        return s + ("_b" if self.bias else "")

    def scaled(self, **kw) -> "Cfg":
        return replace(self, **kw)

    # ------------------------------------------------------------------ tensors
    def make(self, dtype=torch.float32, device="cpu"):
        """Random x, weight, bias (bias None when cfg.bias is False), O(1)-scaled outputs."""
        kh, kw = self.k
        fan = max(1, (self.Cin // self.groups) * kh * kw)
        x = torch.randn(self.N, self.Cin, self.H, self.W, device=device).to(dtype)
        w = (torch.randn(self.Cin, self.Cout // self.groups, kh, kw, device=device)
             / math.sqrt(fan)).to(dtype)
        b = torch.randn(self.Cout, device=device).to(dtype) if self.bias else None
        return x, w, b


# --------------------------------------------------------------------------- the reference

def reference(x, w, b, kwargs, gy=None, device="cpu"):
    """torch's conv_transpose2d on float64 copies (on `device`): (out, grads or None).

    grads is (gx, gw, gb) with gb None when b is None."""
    xr = x.detach().to(device=device, dtype=torch.float64).contiguous()
    wr = w.detach().to(device=device, dtype=torch.float64).contiguous()
    br = None if b is None else b.detach().to(device=device, dtype=torch.float64)
    if gy is None:
        with torch.no_grad():
            return F.conv_transpose2d(xr, wr, br, **kwargs), None
    leaves = [t.requires_grad_() for t in (xr, wr, br) if t is not None]
    out = F.conv_transpose2d(xr, wr, br, **kwargs)
    g = torch.autograd.grad(out, leaves, gy.detach().to(device=device, dtype=torch.float64))
    grads = (g[0], g[1], g[2] if b is not None else None)
    return out.detach(), grads


def ours(x, w, b, kwargs, gy=None, fn=None):
    """convt2d's forward (and grads for gy) on leaves that keep x/w/b's exact strides."""
    fn = convt2d.forward if fn is None else fn
    if gy is None:
        with torch.no_grad():
            return fn(x, w, b, **kwargs), None
    xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
    bl = None if b is None else b.detach().requires_grad_()
    leaves = [t for t in (xl, wl, bl) if t is not None]
    out = fn(xl, wl, bl, **kwargs)
    g = torch.autograd.grad(out, leaves, gy)
    return out.detach(), (g[0], g[1], g[2] if b is not None else None)


# ------------------------------------------------------------------------------- poisoning

def _fill(t: torch.Tensor, value: float):
    if math.isnan(value):
        t.fill_(0xFF)  # 0xFF.. bytes are a NaN in every floating dtype
    else:
        t[: t.numel() // 4 * 4].view(torch.float32).fill_(value)


def poison(device, nbytes: int, value: float = float("nan")):
    """Make the next allocations come back holding `value` (NaN by default).

    CUDA: every free block the caching allocator holds for `device` is taken (read from
    torch.cuda.memory_snapshot(); requests of exactly a block's size get that block, small-pool
    blocks in pieces of at most 1 MiB), filled, and given back; plus one fresh block of at
    least nbytes for allocations that no cached block fits. So whatever the kernels allocate
    next is carved out of poisoned memory. CPU: allocate/fill/free a block of nbytes (glibc
    usually hands the same memory back)."""
    device = torch.device(device)
    nbytes = max(int(nbytes), 1 << 20)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.synchronize(idx)
        # Each call adds a fresh block to the allocator's cache (every cached block is held
        # while it is made), so over a whole test run the cache would fill the GPU: give it
        # back once it holds half the memory (the next allocations then come from the fresh,
        # poisoned block, as documented).
        total = torch.cuda.get_device_properties(idx).total_memory
        if torch.cuda.memory_reserved(idx) > total // 2:
            torch.cuda.empty_cache()
        with torch.cuda.device(idx):
            sizes = []
            for seg in torch.cuda.memory_snapshot():
                if seg.get("device", idx) != idx:
                    continue
                small = seg.get("segment_type") == "small"
                for blk in seg["blocks"]:
                    if blk["state"] != "inactive":
                        continue
                    n = blk["size"]
                    while small and n > (1 << 20):
                        sizes.append(1 << 20)
                        n -= 1 << 20
                    if n >= 512:
                        sizes.append(n)
            held = [torch.empty(n, dtype=torch.uint8, device=idx)
                    for n in sorted(sizes, reverse=True)]
            held.append(torch.empty(nbytes + (4 << 20), dtype=torch.uint8, device=idx))
            held += [torch.empty(1 << 20, dtype=torch.uint8, device=idx) for _ in range(4)]
            for t in held:
                _fill(t, value)
            torch.cuda.synchronize(idx)
            del held
    else:
        t = torch.empty(nbytes // 4, dtype=torch.float32)
        t.fill_(value)
        del t


def nbytes_of(shape, dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


# ------------------------------------------------------------------------- the main check

def check(x, w, b, kwargs, *, backward=True, ref_device="cpu", fn=None, gy=None,
          dtype=None, what=""):
    """Run convt2d (forward, and backward with a random upstream gradient) on poisoned memory
    and compare with the float64 reference. Returns (out, grads) from convt2d.

    On the CPU the call is made twice (poisoned with NaN, then with 1e4) and both runs must
    agree bitwise."""
    dtype = x.dtype if dtype is None else dtype
    device = x.device
    ref_out, _ = reference(x, w, b, kwargs, None, device=ref_device)
    if backward:
        if gy is None:
            gy = torch.randn(ref_out.shape, device=device).to(dtype)
        ref_out, ref_grads = reference(x, w, b, kwargs, gy, device=ref_device)
    out_bytes = nbytes_of(ref_out.shape, dtype)
    # room for the output, all gradients and temporaries
    poison(device, 2 * (out_bytes + nbytes_of(x.shape, dtype) + nbytes_of(w.shape, dtype)))
    out, grads = ours(x, w, b, kwargs, gy if backward else None, fn=fn)
    assert_close(out, ref_out, dtype, device, f"{what}forward")
    if backward:
        for name, g, r in zip(("grad_input", "grad_weight", "grad_bias"), grads, ref_grads):
            if r is None:
                assert g is None
                continue
            tol = None
            if name == "grad_bias":
                # A sum of few gy values can cancel (hypothesis found one at 1.3e-4 relative in
                # fp32, 2026-11-24): measure the error against the sum of |gy|, the scale
                # any summation's rounding error is bounded by, not against the cancelled sum.
                cdim = gy.dim() - 3  # the channel dim (unbatched inputs have no batch dim)
                gabs = gy.detach().to(device="cpu", dtype=torch.float64).abs().sum(
                    [d for d in range(gy.dim()) if d != cdim])
                den = torch.linalg.vector_norm(gabs).item()
                num = torch.linalg.vector_norm(r.detach().double().cpu()).item()
                if 0 < num < den:
                    tol = tolerance(dtype, device) * den / num
            assert_close(g, r, dtype, device, f"{what}{name}", tol=tol)
    if device.type == "cpu":
        poison(device, out_bytes, 1e4)
        out2, grads2 = ours(x, w, b, kwargs, gy if backward else None, fn=fn)
        assert torch.equal(out, out2), f"{what}forward differs between two identical CPU runs"
        if backward:
            for name, g, g2 in zip(("grad_input", "grad_weight", "grad_bias"), grads, grads2):
                if g is not None:
                    assert torch.equal(g, g2), f"{what}{name} differs between two CPU runs"
    return out, grads


def check_cfg(cfg: Cfg, dtype, device, **kw):
    x, w, b = cfg.make(dtype, device)
    return check(x, w, b, cfg.kwargs(), **kw)
