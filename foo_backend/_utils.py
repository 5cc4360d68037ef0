"""What every torch.foo module shares: the native extension, lazy initialisation, device arguments."""
import threading
from typing import Any

import torch

from . import _extension

_C = _extension.load()

DEVICE_TYPE = "foo"

_initialization_lock = threading.Lock()


def is_initialized() -> bool:
    """Whether foo has been initialised in this process (False in a child forked after initialisation)."""
    return _C._is_initialized()


def _lazy_init() -> None:
    """Initialise foo on first use, as torch.cuda does."""
    if is_initialized():
        return
    _check_not_in_bad_fork()
    with _initialization_lock:
        if not is_initialized():
            _C._init()


def _get_device_index(device: Any, optional: bool = False) -> int:
    """The foo device index of ``device`` (an int, a string, a ``torch.device`` or None).

    As in ``torch.cuda._utils._get_device_index``: a device without an index, and None when
    ``optional`` is true, mean the current device.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"Expected a foo device, but got: {device}")
        index = device.index
    elif isinstance(device, int):
        index = device
    elif device is None:
        index = None
    else:
        raise TypeError(f"Expected a foo device (int, str or torch.device), but got: {device!r}")
    if index is None:
        if not optional:
            raise ValueError(f"Expected a foo device with a specified index or an integer, but got: {device}")
        index = _C._get_device()
    return index


def _check_device_index(index: int) -> int:
    """``index`` if foo has a device of that index; otherwise the error foo raises for an invalid device
    index everywhere (the C++ side's ``checkDeviceIndex`` raises the same), which names the valid range."""
    count = _C._device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device foo:{index}: foo has {count} device{'' if count == 1 else 's'} "
            f"(valid device indices are 0 to {count - 1})"
        )
    return index


def _check_not_in_bad_fork() -> None:
    """Raise CUDA's error in a child forked after foo was initialised: foo cannot be used there."""
    if _C._is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize foo in forked subprocess. To use foo with multiprocessing, you must use the "
            "'spawn' start method"
        )
