"""Bad input: convt2d must raise what torch.nn.functional.conv_transpose2d raises.

For every case both torch and convt2d are called on the same tensors; the test asserts
  * torch raises (otherwise the case itself is wrong),
  * convt2d raises an exception of exactly the same type,
  * convt2d's message names the offending argument/value (`must_contain`),
  * and, for cases marked EXACT, str(ours) == str(torch's).

torch's float32 CPU path runs through oneDNN, whose messages for some cases are generic
("could not create a primitive descriptor ..."). When torch's message for the float32 inputs
is such a generic oneDNN message (or, on CUDA, "Trying to create tensor with negative
dimension" for a too-small output), the expected message is torch's message for float64 CPU
copies of the same inputs (torch's native path, which validates with its own messages).

Not exact (by design): dilation 0 (torch/oneDNN: a generic message), negative dilation
(torch's message is a prefix of ours; ours adds the value), non-floating dtype (torch's
message names its internal kernel, e.g. '"slow_conv_transpose2d_out_cpu" not implemented
for 'Int'').
"""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convt2d

EXACT, PREFIX, CONTAINS = "exact", "prefix", "contains"
# torch messages that do not come from its argument checks (oneDNN on CPU float32/bf16,
# a shape error on CUDA for too-small outputs)
GENERIC = re.compile(r"could not create a primitive|could not construct a memory "
                     r"descriptor|ONEDNN_VERBOSE|Trying to create tensor with negative dimension",
                     re.I)


def _t(shape, dtype, device):
    return torch.randn(shape, device=device).to(dtype)


def std(dtype, device, x=(2, 4, 5, 5), w=(4, 6, 3, 3), b=None, **kw):
    """Positional (input, weight, bias) plus keyword arguments for conv_transpose2d."""
    args = (_t(x, dtype, device), _t(w, dtype, device),
            None if b is None else _t(b, dtype, device))
    return args, kw


# name -> (builder(dtype, device) -> (args, kwargs), mode, strings the message must contain)
CASES = {
    "input_5d": (lambda dt, dv: std(dt, dv, x=(1, 2, 4, 5, 5)), EXACT, ["[1, 2, 4, 5, 5]"]),
    "input_2d": (lambda dt, dv: std(dt, dv, x=(4, 5)), EXACT, ["[4, 5]"]),
    "input_1d": (lambda dt, dv: std(dt, dv, x=(4,)), EXACT, ["[4]"]),
    "cin_mismatch": (lambda dt, dv: std(dt, dv, x=(2, 3, 5, 5)), EXACT,
                     ["3 channels", "[4, 6, 3, 3]"]),
    "cin_mismatch_unbatched": (lambda dt, dv: std(dt, dv, x=(3, 5, 5)), EXACT, ["3 channels"]),
    "groups_not_dividing_channels": (
        lambda dt, dv: std(dt, dv, x=(2, 6, 5, 5), w=(6, 2, 3, 3), groups=4), EXACT,
        ["groups=4"]),
    "groups_larger_than_channels": (lambda dt, dv: std(dt, dv, groups=8), EXACT, ["groups=8"]),
    "groups_0": (lambda dt, dv: std(dt, dv, groups=0), EXACT, ["groups"]),
    "groups_negative": (lambda dt, dv: std(dt, dv, groups=-2), EXACT, ["groups"]),
    "stride_0": (lambda dt, dv: std(dt, dv, stride=0), EXACT, ["stride"]),
    "stride_negative": (lambda dt, dv: std(dt, dv, stride=(1, -1)), EXACT, ["stride"]),
    "stride_3_values": (lambda dt, dv: std(dt, dv, stride=(1, 1, 1)), EXACT,
                        ["stride", "[1, 1, 1]"]),
    "stride_float_element": (lambda dt, dv: std(dt, dv, stride=(1.5, 1)), CONTAINS,
                             ["stride"]),
    "padding_float": (lambda dt, dv: std(dt, dv, padding=1.5), CONTAINS, ["padding"]),
    "dilation_str": (lambda dt, dv: std(dt, dv, dilation="ab"), CONTAINS, ["dilation"]),
    "stride_bool": (lambda dt, dv: std(dt, dv, stride=True), CONTAINS, ["stride"]),
    "stride_bool_element": (lambda dt, dv: std(dt, dv, stride=(True, 1)), CONTAINS, ["stride"]),
    "stride_range": (lambda dt, dv: std(dt, dv, stride=range(1, 3)), CONTAINS, ["stride"]),
    "groups_bool": (lambda dt, dv: std(dt, dv, groups=True), CONTAINS, ["groups"]),
    "groups_float": (lambda dt, dv: std(dt, dv, groups=1.0), CONTAINS, ["groups"]),
    "dilation_0": (lambda dt, dv: std(dt, dv, dilation=0), CONTAINS, ["dilation", "0"]),
    "dilation_negative": (lambda dt, dv: std(dt, dv, dilation=(1, -2)), PREFIX, ["dilation"]),
    "padding_negative": (lambda dt, dv: std(dt, dv, padding=-1), EXACT, ["padding"]),
    "padding_negative_w": (lambda dt, dv: std(dt, dv, padding=(0, -3)), EXACT, ["padding"]),
    "output_padding_negative": (lambda dt, dv: std(dt, dv, output_padding=-1), EXACT,
                                ["output_padding"]),
    "output_padding_eq_stride": (lambda dt, dv: std(dt, dv, stride=2, output_padding=2), EXACT,
                                 ["output_padding_height: 2", "stride_height: 2"]),
    "output_padding_ge_stride_and_dilation": (
        lambda dt, dv: std(dt, dv, stride=(2, 1), dilation=(1, 3), output_padding=(1, 3)),
        EXACT, ["output_padding_width: 3", "dilation_width: 3"]),
    "output_too_small": (lambda dt, dv: std(dt, dv, x=(2, 4, 1, 1), padding=2), EXACT,
                         ["(1 x 1)", "(-1 x -1)", "too small"]),
    "output_too_small_w": (lambda dt, dv: std(dt, dv, x=(2, 4, 3, 1), padding=(0, 1),
                                              w=(4, 6, 3, 1)), EXACT, ["(5 x -1)"]),
    "zero_spatial_input": (lambda dt, dv: std(dt, dv, x=(2, 4, 0, 5)), EXACT,
                           ["[2, 4, 0, 5]"]),
    "bias_wrong_size": (lambda dt, dv: std(dt, dv, b=(5,)), EXACT, ["[5]", "6 elements"]),
    "bias_2d": (lambda dt, dv: std(dt, dv, b=(6, 1)), EXACT, ["[6, 1]"]),
}
CASE_NAMES = list(CASES)

DTYPE_CASES = {
    # (x dtype, w dtype, b dtype or None)
    "x_f32_w_f64": (torch.float32, torch.float64, None),
    "x_f64_w_f32": (torch.float64, torch.float32, None),
    "x_f32_b_f64": (torch.float32, torch.float32, torch.float64),
    "x_f16_w_f32": (torch.float16, torch.float32, None),
    "x_bf16_w_f16": (torch.bfloat16, torch.float16, torch.float16),
}

DEVICE_DTYPES = [("cpu", torch.float32), ("cpu", torch.float64),
                 pytest.param("cuda", torch.float32, marks=pytest.mark.cuda)]
DD_IDS = ["cpu-float32", "cpu-float64", "cuda-float32"]


def _call(fn, args, kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _to_cpu64(args):
    return tuple(a.cpu().double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                 else a for a in args)


def compare(args, kwargs, mode, must_contain, fn=convt2d.conv_transpose2d):
    e_torch = _call(F.conv_transpose2d, args, kwargs)
    assert e_torch is not None, "torch accepts these arguments: the test case is wrong"
    if GENERIC.search(str(e_torch)):
        e64 = _call(F.conv_transpose2d, _to_cpu64(args), kwargs)
        if e64 is not None and type(e64) is type(e_torch):
            e_torch = e64
    e_ours = _call(fn, args, kwargs)
    assert e_ours is not None, f"convt2d accepted arguments torch rejects with: {e_torch!r}"
    assert type(e_ours) is type(e_torch), \
        f"exception type {type(e_ours).__name__} != torch's {type(e_torch).__name__} " \
        f"(ours: {e_ours}; torch: {e_torch})"
    msg, ref = str(e_ours), str(e_torch)
    for s in must_contain:
        assert s.lower() in msg.lower(), f"message does not name {s!r}: {msg!r}"
    if mode == EXACT:
        assert msg == ref, f"message differs from torch's:\n  ours:  {msg!r}\n  torch: {ref!r}"
    elif mode == PREFIX:
        assert msg.startswith(ref), f"message does not start with torch's:\n  ours:  " \
                                    f"{msg!r}\n  torch: {ref!r}"


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DD_IDS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input(case, device, dtype):
    build, mode, must = CASES[case]
    args, kwargs = build(dtype, device)
    compare(args, kwargs, mode, must)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("case", list(DTYPE_CASES))
def test_mixed_dtypes(case, device):
    xd, wd, bd = DTYPE_CASES[case]
    x = _t((2, 4, 5, 5), xd, device)
    w = _t((4, 6, 3, 3), wd, device)
    b = None if bd is None else _t((6,), bd, device)
    compare((x, w, b), {}, EXACT, [])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.bool], ids=str)
def test_non_floating_dtype(device, dtype):
    x = torch.randint(0, 3, (2, 4, 5, 5), device=device).to(dtype)
    w = torch.randint(0, 3, (4, 6, 3, 3), device=device).to(dtype)
    name = {torch.int32: "Int", torch.int16: "Short", torch.bool: "Bool"}[dtype]
    # convt2d lets torch raise for non-floating dtypes, so the message is torch's own; torch's
    # CPU message names the dtype, its CUDA message may come from cuDNN (e.g. for int32).
    compare((x, w, None), {}, EXACT, [name] if device == "cpu" else [])


@pytest.mark.cuda
@pytest.mark.parametrize("where", ["weight_cpu", "input_cpu", "bias_cpu"])
def test_mixed_devices(where):
    x = torch.randn(2, 4, 5, 5, device="cpu" if where == "input_cpu" else "cuda")
    w = torch.randn(4, 6, 3, 3, device="cpu" if where == "weight_cpu" else "cuda")
    b = torch.randn(6, device="cpu" if where == "bias_cpu" else "cuda")
    compare((x, w, b), {}, EXACT, [])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("output_size", [(10, 11), (13, 12), (11,), [2, 6, 13, 13, 1]],
                         ids=str)
def test_module_output_size_out_of_range(device, output_size):
    ref = nn.ConvTranspose2d(4, 6, 3, stride=2).to(device)
    ours = convt2d.ConvTranspose2d(4, 6, 3, stride=2).to(device)
    x = torch.randn(2, 4, 5, 5, device=device)
    e_ref = _call(ref, (x,), dict(output_size=output_size))
    e_ours = _call(ours, (x,), dict(output_size=output_size))
    assert isinstance(e_ref, ValueError)
    assert type(e_ours) is type(e_ref)
    assert str(e_ours) == str(e_ref)
    named = (f"got {len(output_size)}" if len(output_size) not in (2, 4)
             else str(tuple(output_size)))
    assert named in str(e_ours), str(e_ours)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_backward_op_rejects_wrong_grad_output(device):
    x = torch.randn(2, 4, 5, 5, device=device)
    w = torch.randn(4, 6, 3, 3, device=device)
    gy = torch.randn(2, 6, 7, 6, device=device)  # right would be (2, 6, 7, 7)
    with pytest.raises(RuntimeError, match="grad_output"):
        torch.ops.convt2d.backward(gy, x, w, [1, 1], [0, 0], [0, 0], 1, [1, 1],
                                   [True, True, True])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_int_like_arguments(device):
    """What torch takes for stride / padding / output_padding / dilation, convt2d takes with the
    same result: ints, tuples, lists, torch.Size, numpy integers, 0-d integer tensors."""
    import numpy as np

    x = torch.randn(2, 4, 5, 6, device=device, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 2, device=device, dtype=torch.float64)
    for args in [(2, 1, 1, 1, 1), ((2, 1), (1, 0), (1, 0), 1, (1, 2)),
                 ([2, 1], [1, 0], [0, 0], 1, [1, 2]),
                 (torch.Size([2, 1]), (np.int64(1), 0), 0, 1, np.int64(1)),
                 (torch.tensor(2), 1, 1, 1, 1)]:
        torch.testing.assert_close(convt2d.forward(x, w, None, *args),
                                   F.conv_transpose2d(x, w, None, *args))
