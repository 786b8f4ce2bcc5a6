"""Modules: a drop-in ``nn.ConvTranspose2d`` and ``convert`` for whole models."""
from typing import List, Optional

import torch
from torch import Tensor, nn

from .functional import forward as _forward


class ConvTranspose2d(nn.ConvTranspose2d):
    """Drop-in replacement for :class:`torch.nn.ConvTranspose2d` running convt2d kernels.

    Same constructor arguments, parameter names, shapes, initialisation and state_dict as
    ``nn.ConvTranspose2d`` (it is a subclass); ``forward(input, output_size=None)``.
    """

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose2d")
        assert isinstance(self.padding, tuple)
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 2, self.dilation)
        return _forward(input, self.weight, self.bias, self.stride, self.padding,
                        output_padding, self.groups, self.dilation)


def convert(model: nn.Module) -> nn.Module:
    """Replace every ``nn.ConvTranspose2d`` in ``model`` (in place) by convt2d's.

    The modules keep their parameters (the same ``Parameter`` objects, so optimizers built
    before the call keep working), buffers and hooks; only their class changes. Subclasses of
    ``nn.ConvTranspose2d`` with their own ``forward`` are left alone. Returns ``model``.
    """
    for m in model.modules():
        if type(m) is nn.ConvTranspose2d:
            m.__class__ = ConvTranspose2d
    return model
