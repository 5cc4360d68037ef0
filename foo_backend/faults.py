"""Failures injected on purpose, to test the code that recovers from them (``torch.foo.faults``).

A GPU runs out of memory when a test cannot choose; foo fails where the test says, so that recovery code
(a smaller batch after an out-of-memory error, as accelerate's ``find_executable_batch_size`` tries) runs
in CI without huge memory.
"""
from typing import Any, Optional

from ._utils import _C, _get_device_index, _lazy_init

__all__ = ["fail_allocation"]


def fail_allocation(after: Optional[int] = 0, device: Any = None) -> None:
    """Make an allocation on a foo device raise ``torch.OutOfMemoryError``: the one after ``after`` more
    allocations succeed (``0``, the default: the next one), once. ``after=None`` disarms it.

    The error is the allocator's own: ``memory_stats()["num_ooms"]`` counts it, the profiler and the memory
    history record it, its message says it was injected, and the allocator and the other devices stay usable.
    Allocations the host makes count (tensors, their gradients, an optimizer's state), not the temporaries of
    kernels running on a stream.

    Args:
        after (int or None): allocations that succeed first.
        device (torch.device, str or int, optional): the device. It uses the current device, given by
            :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    if after is not None and (not isinstance(after, int) or after < 0):
        raise ValueError(f"fail_allocation: after must be a non-negative int or None, got {after!r}")
    _lazy_init()
    _C._fail_allocation(-1 if after is None else after, _get_device_index(device, optional=True))
