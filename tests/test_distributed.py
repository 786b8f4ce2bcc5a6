"""convt2d under DistributedDataParallel (NCCL, 2 GPUs, one process per GPU): a short DCGAN
generator training run gives the same weights as nn.ConvTranspose2d under DDP, and each
rank's convolutions run on its own GPU. Skips with fewer than 2 GPUs."""
import copy
import os
import socket

import pytest
import torch
import torch.nn as nn

pytestmark = pytest.mark.cuda

WORLD = 2


def _generator(nz=16, ngf=16):
    layers, c = [], nz
    for i, co in enumerate([ngf * 4, ngf * 2, ngf]):
        layers += [nn.ConvTranspose2d(c, co, 4, 1 if i == 0 else 2, 0 if i == 0 else 1,
                                      bias=(i == 1)), nn.BatchNorm2d(co), nn.ReLU(True)]
        c = co
    layers += [nn.ConvTranspose2d(c, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def _worker(rank, port, out_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import convt2d

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD)
    try:
        torch.backends.cudnn.allow_tf32 = False  # IEEE fp32 on both sides: tight comparison
        torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device("cuda", rank)
        torch.manual_seed(0)
        base = _generator().to(dev)
        models = {"torch": base, "convt2d": convt2d.convert(copy.deepcopy(base))}
        results = {}
        for name, m in models.items():
            ddp = DDP(m, device_ids=[rank])
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
            g = torch.Generator(device=dev).manual_seed(100 + rank)  # each rank its own data
            for _ in range(5):
                z = torch.randn(8, 16, 1, 1, device=dev, generator=g)
                target = torch.randn(8, 3, 32, 32, device=dev, generator=g)
                out = ddp(z)
                assert out.device == dev, (out.device, dev)
                loss = torch.nn.functional.mse_loss(out, target)
                opt.zero_grad()
                loss.backward()
                opt.step()
            results[name] = {k: v.detach().cpu() for k, v in m.state_dict().items()}
        if rank == 0:
            torch.save(results, out_path)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason="needs 2 GPUs")
def test_ddp_dcgan_matches_nn(tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_nccl_available():
        pytest.skip("no NCCL in this torch")
    out = tmp_path / "weights.pt"
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    res = torch.load(out)
    assert res["torch"].keys() == res["convt2d"].keys()
    for k, ref in res["torch"].items():
        got = res["convt2d"][k]
        if not ref.is_floating_point():
            assert torch.equal(got, ref), k
            continue
        err = (got.double() - ref.double()).norm() / max(ref.double().norm(), 1e-30)
        assert err < 1e-4, f"{k}: relative difference {err:.2e} after 5 DDP steps"
