"""Failures injected on purpose, to test the code that recovers from them (``torch.foo.faults``).

A GPU runs out of memory, a kernel trips a device-side assert, or a device stops responding, when a test cannot
choose; foo fails where the test says, so that recovery code (a smaller batch after an out-of-memory error, as
accelerate's ``find_executable_batch_size`` tries; a retry after a failed step; a job that carries on without a
lost device) runs in CI without huge memory or broken hardware.
"""
from typing import Any, Optional

from ._utils import _C, _get_device_index, _lazy_init

__all__ = ["fail_allocation", "fail_launch", "lose_device", "restore_device"]


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


def fail_launch(op: str, device: Any = None) -> None:
    """Make the next call of an operator on a foo device fail as a device-side assert does: the call returns,
    and the next synchronizing call (``torch.foo.synchronize()``, ``.cpu()``, ``item()``...) raises
    ``RuntimeError: ... device-side assert triggered in <op>``, once. The stream and the device go on.
    Operators foo makes views with itself (``view``, ``expand``, ``select``...) launch nothing and never take it.

    Args:
        op (str): the operator's name, without its overload (``"aten::mul"``, ``"aten::addmm"``).
        device (torch.device, str or int, optional): the device. It uses the current device, given by
            :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    if not isinstance(op, str) or "::" not in op:
        raise ValueError(f"fail_launch: op must be an operator's name such as 'aten::mul', got {op!r}")
    _lazy_init()
    _C._fail_launch(op, _get_device_index(device, optional=True))


def lose_device(after: int = 0, device: Any = None) -> None:
    """Make a foo device fail as a GPU that stops responding: after ``after`` more launches on it (``0``, the
    default: the next one), that launch and every later launch, allocation or synchronization on the device
    raise ``RuntimeError: foo:N was lost ...``. Tensors on it can still be freed, and the other devices go on.
    No GPU comes back; :func:`restore_device` gives a test its device again.

    Args:
        after (int): launches that succeed first.
        device (torch.device, str or int, optional): the device. It uses the current device, given by
            :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    if not isinstance(after, int) or after < 0:
        raise ValueError(f"lose_device: after must be a non-negative int, got {after!r}")
    _lazy_init()
    _C._lose_device(after, _get_device_index(device, optional=True))


def restore_device(device: Any = None) -> None:
    """Give back a device that :func:`lose_device` lost (or disarm a loss not yet reached).

    Args:
        device (torch.device, str or int, optional): the device. It uses the current device, given by
            :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    _lazy_init()
    _C._restore_device(_get_device_index(device, optional=True))
