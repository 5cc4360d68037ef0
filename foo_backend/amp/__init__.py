r"""``torch.foo.amp``: foo's automatic mixed precision, as ``torch.cuda.amp`` is CUDA's.

``torch.autocast("foo")`` and ``torch.amp.GradScaler("foo")`` are the generic spellings; these classes
only fix the device type. Autocast casts op by op exactly as CUDA's autocast does (the kernels are in
``csrc/Autocast.cpp``); the default lower-precision dtype is float16.
"""
from typing import Any, Optional

import torch

__all__ = ["autocast", "GradScaler"]


class autocast(torch.amp.autocast):
    """``torch.autocast("foo", ...)``: usable as a context manager and as a decorator."""

    def __init__(self, enabled: bool = True, dtype: Optional[torch.dtype] = None, cache_enabled: bool = True):
        super().__init__("foo", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("foo", ...)``: scales the loss, unscales and checks gradients on foo."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, **kwargs: Any):
        super().__init__("foo", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled, **kwargs)
