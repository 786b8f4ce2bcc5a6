"""Training check: a DCGAN-style generator and a U-Net decoder, trained for 100 steps from the
same initial weights and data, once with torch's nn.ConvTranspose2d and once after
convt2d.convert(model). The two loss curves and the final weights must agree within a tolerance
that fits the arithmetic (fp32 IEEE, TF32, bf16 autocast), and both runs must actually learn.
The target is a teacher network's output, so the task is learnable. On the CPU the two runs
agree to about 2e-7 relative (tolerance 1e-3). A wrong gradient would make the two runs
diverge far beyond these tolerances.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import convt2d

STEPS = 100


class Generator(nn.Module):
    """DCGAN generator: z (N, nz, 1, 1) -> image (N, 3, 8*4, 8*4) through four transposed convs."""

    def __init__(self, nz: int, ngf: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(),
            nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class UNetDecoder(nn.Module):
    """Two U-Net up-steps: 2x2 stride-2 transposed conv, concat with the skip, 3x3 conv."""

    def __init__(self, c: int):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.conv1 = nn.Conv2d(4 * c, 2 * c, 3, padding=1)
        self.up2 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.conv2 = nn.Conv2d(2 * c, c, 3, padding=1)
        self.head = nn.Conv2d(c, 3, 1)

    def forward(self, x, skip1, skip2):
        y = F.relu(self.conv1(torch.cat([self.up1(x), skip1], 1)))
        y = F.relu(self.conv2(torch.cat([self.up2(y), skip2], 1)))
        return self.head(y)


def _train(model, inputs, target, autocast_dtype=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(target.device.type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            out = model(*inputs)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def _compare(make_model, make_data, device, autocast_dtype, tol, upd_tol=None):
    upd_tol = tol if upd_tol is None else upd_tol
    torch.manual_seed(1234)
    ref_model = make_model().to(device)
    ours_model = convt2d.convert(copy.deepcopy(ref_model))
    assert any(type(m) is convt2d.ConvTranspose2d for m in ours_model.modules())
    assert not any(type(m) is nn.ConvTranspose2d for m in ours_model.modules())
    # a teacher of the same architecture (other weights) makes the target: the task is
    # learnable, so the loss falls far within 100 steps
    teacher = make_model().to(device)
    inputs = make_data(device)
    with torch.no_grad():
        target = teacher(*inputs).float()
    init = [p.detach().double().clone() for p in ref_model.parameters()]
    ref_losses = _train(ref_model, inputs, target, autocast_dtype)
    our_losses = _train(ours_model, inputs, target, autocast_dtype)
    # both runs learn
    assert ref_losses[-1] < 0.5 * ref_losses[0], f"reference did not train: {ref_losses[[0, -1]]}"
    assert our_losses[-1] < 0.5 * our_losses[0], f"convt2d did not train: {our_losses[[0, -1]]}"
    print(f"losses {ref_losses[0]:.4f} -> {ref_losses[-1]:.4f}")
    # the loss curves track each other step by step
    rel = ((our_losses - ref_losses).abs() / ref_losses.abs()).max().item()
    assert rel <= tol, f"loss curves differ by {rel:.2e} (relative, worst step) > {tol:.0e}"
    # and so do the weight updates (final - initial: the initial weights would hide them)
    for (name, p_ref), (_, p_our), p0 in zip(ref_model.named_parameters(),
                                             ours_model.named_parameters(), init):
        d_ref, d_our = p_ref.detach().double() - p0, p_our.detach().double() - p0
        err = ((d_our - d_ref).norm() / d_ref.norm()).item()
        assert err <= upd_tol, f"{name}: weight updates differ by {err:.2e} (relative) > {upd_tol:.0e}"


def _dcgan(nz, ngf, n):
    def make_model():
        return Generator(nz, ngf)

    def make_data(device):
        return (torch.randn(n, nz, 1, 1, device=device),)
    return make_model, make_data


def _unet(c, n, hw):
    def make_model():
        return UNetDecoder(c)

    def make_data(device):
        x = torch.randn(n, 4 * c, hw, hw, device=device)
        s1 = torch.randn(n, 2 * c, 2 * hw, 2 * hw, device=device)
        s2 = torch.randn(n, c, 4 * hw, 4 * hw, device=device)
        return (x, s1, s2)
    return make_model, make_data


@pytest.mark.parametrize("net", ["dcgan", "unet"])
def test_training_tracks_torch_cpu(net):
    """Tiny models, fp32 on the CPU (convt2d's own CPU kernels vs torch's)."""
    mk = _dcgan(nz=8, ngf=4, n=8) if net == "dcgan" else _unet(c=4, n=2, hw=4)
    _compare(*mk, "cpu", None, tol=1e-3)


# GPU: fp32 with TF32 off (3xTF32 / FFMA vs cuDNN IEEE), fp32 with torch's default TF32, and
# bf16 autocast. Tolerances (loss curve, weight updates): TF32 and bf16 round every operand
# (relative 1e-3 / 4e-3 per op), so two correct implementations drift apart more than in IEEE
# fp32. The generator's first layer (1x1 input, followed by BatchNorm over the batch) has the
# most sensitive updates: measured on the H100, 7.9e-3 (IEEE) and 3.3e-2 (TF32) relative, while
# the loss curves agreed within 1e-3 / 3e-2.
GPU_MODES = [("fp32-ieee", None, False, 1e-3, 2e-2), ("fp32-tf32", None, True, 3e-2, 1e-1),
             ("bf16-autocast", torch.bfloat16, True, 1e-1, 1e-1)]


@pytest.mark.cuda
@pytest.mark.parametrize("mode", GPU_MODES, ids=[m[0] for m in GPU_MODES])
@pytest.mark.parametrize("net", ["dcgan", "unet"])
def test_training_tracks_torch_cuda(net, mode):
    _, autocast_dtype, tf32, tol, upd_tol = mode
    mk = _dcgan(nz=64, ngf=32, n=32) if net == "dcgan" else _unet(c=32, n=4, hw=16)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        _compare(*mk, "cuda", autocast_dtype, tol, upd_tol)
