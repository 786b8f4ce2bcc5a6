"""convt2d.ConvTranspose2d (drop-in nn.ConvTranspose2d) and convt2d.convert(model)."""
import copy

import pytest
import torch
from torch import nn

import convt2d
from conftest import DEVICES, assert_close, reference, tolerance

CTOR_ARGS = [
    dict(in_channels=4, out_channels=6, kernel_size=3),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0),
         output_padding=(1, 0), groups=2, bias=False, dilation=(1, 2)),
    dict(in_channels=8, out_channels=4, kernel_size=4, stride=2, padding=1, groups=4),
    dict(in_channels=3, out_channels=5, kernel_size=(1, 5), stride=3, output_padding=2,
         padding_mode="zeros"),
]
CTOR_IDS = ["k3", "full", "g4", "k1x5_op2"]


def _ref_kwargs(m):
    return dict(stride=m.stride, padding=m.padding, groups=m.groups, dilation=m.dilation)


def _tf32_off():
    return torch.backends.cudnn.flags(enabled=True, allow_tf32=False)


@pytest.mark.parametrize("args", CTOR_ARGS, ids=CTOR_IDS)
def test_same_parameters_and_init(args):
    torch.manual_seed(1)
    ref = nn.ConvTranspose2d(**args)
    torch.manual_seed(1)
    ours = convt2d.ConvTranspose2d(**args)
    assert isinstance(ours, nn.ConvTranspose2d)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == \
        [(n, p.shape) for n, p in ref.named_parameters()]
    assert list(ours.state_dict().keys()) == list(ref.state_dict().keys())
    for (n, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, r), f"{n}: different initialisation"
    for attr in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                 "output_padding", "groups", "dilation", "padding_mode", "transposed"):
        assert getattr(ours, attr) == getattr(ref, attr), attr


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", CTOR_ARGS, ids=CTOR_IDS)
def test_state_dict_round_trip_and_outputs(device, args):
    torch.manual_seed(2)
    ref = nn.ConvTranspose2d(**args).to(device)
    ours = convt2d.ConvTranspose2d(**args).to(device)  # different random init
    ours.load_state_dict(ref.state_dict())
    back = nn.ConvTranspose2d(**args).to(device)
    back.load_state_dict(ours.state_dict())
    for (n, p), (_, r) in zip(back.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, r), n
    x = torch.randn(2, args["in_channels"], 5, 6, device=device, requires_grad=True)
    with _tf32_off():
        y = ours(x)
        ref64 = copy.deepcopy(ref).double()
        xr = x.detach().double().requires_grad_()
        yr = ref64(xr)
        assert_close(y, yr.detach(), torch.float32, device, "module output")
        gy = torch.randn_like(y)
        y.backward(gy)
        yr.backward(gy.double())
        assert_close(x.grad, xr.grad, torch.float32, device, "module grad_input")
        for (n, p), (_, r) in zip(ours.named_parameters(), ref64.named_parameters()):
            assert_close(p.grad, r.grad, torch.float32, device, f"module grad {n}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("output_size", [None, (11, 13), (12, 14), [12, 13], [2, 6, 11, 14],
                                         torch.Size([12, 14])], ids=str)
def test_output_size_argument(device, output_size):
    torch.manual_seed(3)
    ref = nn.ConvTranspose2d(4, 6, 3, stride=(2, 2), padding=1, dilation=(1, 1)).to(device)
    ours = convt2d.ConvTranspose2d(4, 6, 3, stride=(2, 2), padding=1).to(device)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 6, 7, device=device)
    with _tf32_off():
        y = ours(x, output_size=output_size)
        yr = copy.deepcopy(ref).double()(x.double(), output_size=output_size)
        assert y.shape == yr.shape
        assert_close(y, yr.detach(), torch.float32, device, "output_size")


@pytest.mark.parametrize("device", DEVICES)
def test_output_size_unbatched(device):
    ref = nn.ConvTranspose2d(3, 2, (2, 3), stride=3).to(device)
    ours = convt2d.ConvTranspose2d(3, 2, (2, 3), stride=3).to(device)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 5, device=device)
    with _tf32_off():
        y = ours(x, output_size=[12, 15])
        yr = copy.deepcopy(ref).double()(x.double(), output_size=[12, 15])
        assert y.shape == yr.shape == (2, 12, 15)
        assert_close(y, yr.detach(), torch.float32, device, "unbatched output_size")


def test_padding_mode_other_than_zeros_is_refused_like_nn():
    with pytest.raises(ValueError) as ref:
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError) as got:
        convt2d.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    assert str(got.value) == str(ref.value)


# ------------------------------------------------------------------------------- convert

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.inner = nn.ModuleList([
            nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(6, 6, 3, padding=1, groups=3,
                                                         bias=False)),
            nn.ModuleDict({"tconv": nn.ConvTranspose2d(6, 4, (1, 3), stride=(1, 2),
                                                       output_padding=(0, 1))}),
        ])
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        x = self.up(x)
        x = self.inner[0](x)
        x = self.inner[1]["tconv"](x)
        return self.conv(x)


class CustomTConv(nn.ConvTranspose2d):
    """A subclass with its own forward: convert must leave it alone."""

    def forward(self, x, output_size=None):
        return super().forward(x, output_size) * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.blocks = nn.Sequential(Block())
        self.head = nn.ConvTranspose2d(4, 2, 2, stride=2, dilation=1)
        self.custom = CustomTConv(2, 2, 1)

    def forward(self, x):
        return self.custom(self.head(self.blocks(self.stem(x))))


@pytest.mark.parametrize("device", DEVICES)
def test_convert_nested_model(device):
    torch.manual_seed(4)
    model = Model().to(device)
    tconvs = [m for m in model.modules() if type(m) is nn.ConvTranspose2d]
    assert len(tconvs) == 4
    params_before = {n: p for n, p in model.named_parameters()}
    ids_before = {n: id(p) for n, p in model.named_parameters()}
    hook_calls = []
    model.head.register_forward_hook(lambda m, i, o: hook_calls.append(type(m)))
    x = torch.randn(2, 3, 5, 4, device=device)
    ref_model = copy.deepcopy(model).double()
    with _tf32_off():
        ref = ref_model(x.double())
        optim = torch.optim.SGD(model.parameters(), lr=0.1)  # built before convert

        out_model = convt2d.convert(model)
        assert out_model is model
        assert all(type(m) is convt2d.ConvTranspose2d for m in tconvs)
        assert not any(type(m) is nn.ConvTranspose2d for m in model.modules())
        assert type(model.custom) is CustomTConv
        assert {n: id(p) for n, p in model.named_parameters()} == ids_before
        assert all(params_before[n] is p for n, p in model.named_parameters())

        out = model(x)
        assert hook_calls and hook_calls[-1] is convt2d.ConvTranspose2d
        assert_close(out, ref.detach(), torch.float32, device, "converted model")
        out.square().sum().backward()
        ref.square().sum().backward()
        for (n, p), (_, r) in zip(model.named_parameters(), ref_model.named_parameters()):
            assert_close(p.grad, r.grad, torch.float32, device, f"converted grad {n}")
        before = model.head.weight.detach().clone()
        optim.step()  # the optimizer still owns the live parameters
        assert not torch.equal(model.head.weight, before)


def test_convert_is_idempotent_and_spares_other_modules():
    model = nn.Sequential(nn.ConvTranspose2d(2, 2, 3), nn.Conv2d(2, 2, 3), nn.ConvTranspose1d(2, 2, 3))
    convt2d.convert(model)
    convt2d.convert(model)
    assert type(model[0]) is convt2d.ConvTranspose2d
    assert type(model[1]) is nn.Conv2d and type(model[2]) is nn.ConvTranspose1d


# ------------------------------------------------------------------------------- autocast

AUTOCAST = [("cpu", torch.bfloat16), ("cpu", torch.float16),
            pytest.param("cuda", torch.float16, marks=pytest.mark.cuda),
            pytest.param("cuda", torch.bfloat16, marks=pytest.mark.cuda)]
AC_IDS = ["cpu-bfloat16", "cpu-float16", "cuda-float16", "cuda-bfloat16"]


@pytest.mark.parametrize("device,ac_dtype", AUTOCAST, ids=AC_IDS)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["x_f32", "x_bf16", "x_f16"])
def test_autocast_matches_nn(device, ac_dtype, x_dtype):
    torch.manual_seed(5)
    ref = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1).to(device)
    ours = convt2d.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1).to(device)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 8, 5, 6, device=device).to(x_dtype)
    with torch.autocast(device_type=device, dtype=ac_dtype):
        yr = ref(x)
        y = ours(x)
        yf = convt2d.forward(x, ref.weight, ref.bias, stride=2, padding=1, output_padding=1)
    assert y.dtype == yr.dtype == yf.dtype, (y.dtype, yr.dtype, yf.dtype)
    # value reference: the autocast-cast operands in float64
    r, _ = reference(x.to(yr.dtype), ref.weight.to(yr.dtype), ref.bias.to(yr.dtype),
                     dict(stride=2, padding=1, output_padding=1))
    assert_close(y, r, yr.dtype, device, "autocast module")
    assert_close(yf, r, yr.dtype, device, "autocast functional")


@pytest.mark.parametrize("device,ac_dtype", AUTOCAST, ids=AC_IDS)
def test_autocast_backward(device, ac_dtype):
    torch.manual_seed(6)
    ours = convt2d.ConvTranspose2d(4, 4, 3, stride=2).to(device)
    ref = nn.ConvTranspose2d(4, 4, 3, stride=2).to(device)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 5, 5, device=device)
    xr = x.clone().requires_grad_()
    x.requires_grad_()
    with torch.autocast(device_type=device, dtype=ac_dtype):
        y = ours(x)
        yr = ref(xr)
    gy = torch.randn_like(yr)
    y.backward(gy)
    yr.backward(gy)
    # grads arrive in the parameters' dtype (float32), through the autocast cast
    assert x.grad.dtype == xr.grad.dtype == torch.float32
    tol = tolerance(ac_dtype, device)
    assert_close(x.grad, xr.grad.double(), torch.float32, device, "autocast grad_input", tol=tol)
    for (n, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters()):
        assert p.grad.dtype == r.grad.dtype
        assert_close(p.grad, r.grad.double(), torch.float32, device, f"autocast {n}", tol=tol)


@pytest.mark.parametrize("device,ac_dtype", AUTOCAST, ids=AC_IDS)
def test_autocast_leaves_float64_alone(device, ac_dtype):
    """torch's autocast does not cast float64 operands (conv_transpose2d stays float64)."""
    torch.manual_seed(7)
    ref = nn.ConvTranspose2d(4, 6, 3).to(device).double()
    ours = convt2d.ConvTranspose2d(4, 6, 3).to(device).double()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 5, 5, device=device, dtype=torch.float64)
    with torch.autocast(device_type=device, dtype=ac_dtype):
        yr = ref(x)
        y = ours(x)
    assert y.dtype == yr.dtype == torch.float64, (y.dtype, yr.dtype)
    assert_close(y, yr, torch.float64, device, "autocast float64")


@pytest.mark.filterwarnings("ignore:.*Disabling autocast")
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_disabled_for_other_device_type(device):
    """Autocast enabled for a different device type must not touch this call."""
    other = "cuda" if device == "cpu" else "cpu"
    x = torch.randn(2, 4, 5, 5, device=device)
    w = torch.randn(4, 3, 3, 3, device=device)
    with torch.autocast(device_type=other, dtype=torch.bfloat16, enabled=True):
        y = convt2d.forward(x, w)
    assert y.dtype == torch.float32
