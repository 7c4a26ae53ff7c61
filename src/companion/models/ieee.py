"""Square roots whose bits do not depend on the CPU's vendor, for tensors on the CPU.

ATen's ``sqrt`` (and ``pow(t, 0.5)``, which calls it) goes through MKL's vector math (``vsSqrt``), whose
generic path refines the hardware's approximate reciprocal square root: other bits on an AMD CPU than on
an Intel one (:mod:`companion.models.optim`, ``companion numerics --emulate``). ATen's ``rsqrt`` and
``reciprocal`` are its own vectorised IEEE square root and division, correctly rounded on every x86-64
CPU, so ``1 / rsqrt(t)`` is reproducible across vendors. Written here because no library offers it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sqrt(t: Tensor) -> Tensor:
    """``sqrt(t)`` as ``1 / rsqrt(t)`` on the CPU (0 at 0, inf at inf; within ~1 ulp), torch's own elsewhere."""
    if t.device.type != "cpu":
        return torch.sqrt(t)
    return torch.reciprocal(torch.rsqrt(t))


def power(t: Tensor, exponent: float) -> Tensor:
    """``t ** exponent``, through :func:`sqrt` where the exponent is 1/2 (ATen's pow then calls its sqrt)."""
    return sqrt(t) if exponent == 0.5 else t**exponent
