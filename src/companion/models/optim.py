"""Adam and AdamW whose bits do not depend on the CPU's vendor: torch's own optimizers, always fused.

torch's default (foreach) Adam takes the square root of its second moment through MKL's vector math
library (``vsSqrt``). On a CPU that MKL treats generically (every AMD CPU, and an Intel CPU under the
numerics profile's ``MKL_CBWR=COMPATIBLE``) that square root refines the hardware's approximate
reciprocal square root (``rsqrtps``), whose bits each vendor implements differently, so the same seed
trains a different network on an AMD EPYC than on an Intel Xeon (measured: ``companion numerics
--emulate``, and the module's test). The fused kernel takes the IEEE square root, correctly rounded on
every x86-64 CPU, and is the same algorithm (it agrees with the default to float rounding).
"""

from __future__ import annotations

from typing import Any

import torch


class Adam(torch.optim.Adam):
    """:class:`torch.optim.Adam` through its fused kernel (vendor-independent square roots)."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        super().__init__(params, fused=True, **kwargs)


class AdamW(torch.optim.AdamW):
    """:class:`torch.optim.AdamW` through its fused kernel (vendor-independent square roots)."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        super().__init__(params, fused=True, **kwargs)
