r"""``torch.foo.amp``: foo's automatic mixed precision, as ``torch.cuda.amp`` is CUDA's.

``torch.autocast("foo")`` and ``torch.amp.GradScaler("foo")`` are the generic spellings; these classes
only fix the device type. Autocast casts op by op exactly as CUDA's autocast does (the kernels are in
``csrc/Autocast.cpp``); the default lower-precision dtype is float16.
"""
from typing import Any, Optional

import torch

__all__ = ["autocast", "GradScaler"]


class autocast(torch.amp.autocast):
    """``torch.autocast("foo", ...)``: usable as a context manager and as a decorator.

    Args:
        enabled (bool, optional): whether autocasting is enabled in the region. Default: ``True``.
        dtype (torch.dtype, optional): the lower-precision dtype ops autocast to. Default: ``None``, the
            autocast dtype of foo (``torch.get_autocast_dtype("foo")``, float16 unless changed).
        cache_enabled (bool, optional): whether the weight cast cache inside autocast is enabled.
            Default: ``True``.
    """

    def __init__(self, enabled: bool = True, dtype: Optional[torch.dtype] = None, cache_enabled: bool = True):
        super().__init__("foo", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("foo", ...)``: scales the loss, unscales and checks gradients on foo.

    Args:
        init_scale (float, optional): initial scale factor. Default: ``2.0**16``.
        growth_factor (float, optional): factor by which the scale is multiplied during ``update`` if no
            inf/NaN gradients occur for ``growth_interval`` consecutive iterations. Default: ``2.0``.
        backoff_factor (float, optional): factor by which the scale is multiplied during ``update`` if
            inf/NaN gradients occur in an iteration. Default: ``0.5``.
        growth_interval (int, optional): number of consecutive iterations without inf/NaN gradients that
            must occur for the scale to be multiplied by ``growth_factor``. Default: ``2000``.
        enabled (bool, optional): if ``False``, disables gradient scaling: ``step`` simply invokes the
            underlying optimizer's ``step()``, and other methods become no-ops. Default: ``True``.
        **kwargs: passed on to ``torch.amp.GradScaler``.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, **kwargs: Any):
        super().__init__("foo", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled, **kwargs)
