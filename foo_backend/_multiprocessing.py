"""Sharing foo tensors with other processes through ``torch.multiprocessing``, as CUDA tensors are shared.

A foo tensor or storage put on a ``torch.multiprocessing`` queue, or passed to a spawned process, arrives as a
foo tensor on the same device index that aliases the sender's memory: writes on either side are seen by the
other once the writer's stream work is ordered before the reader's (events, synchronization). The sender's
queued work on it comes before the receiver's first use (an interprocess event), the sender's block stays
out of its caching allocator's reach while any receiver holds it, and a received tensor can be sent on. The
native side (csrc/device/IpcSharing.h) has the protocol, CUDA's.

The functions here take the names of PyTorch's device-generic IPC hooks (RFC 192099): ``share_device`` is a
storage's ``_share_device_`` (CUDA's ``_share_cuda_``), ``new_shared_device`` its ``_new_shared_device``,
``release_ipc_counter_device`` its ``_release_ipc_counter_device``, and ``rebuild_device_tensor`` is
``reductions.rebuild_cuda_tensor`` for foo. A child forked after foo was initialised cannot receive foo tensors
(as on CUDA: use the spawn or forkserver start method).
"""
from multiprocessing import reduction

import torch
from torch.multiprocessing import reductions

from ._utils import _C, DEVICE_TYPE, _lazy_init
from .streams import Event


def share_device(storage: torch.UntypedStorage) -> tuple:
    """What a foo storage's sharing sends: ``(device, handle, storage_size_bytes, storage_offset_bytes,
    ref_counter_handle, ref_counter_offset, event_handle, event_sync_required)``, as CUDA's ``_share_cuda_``.
    The handle is ``None`` for an empty storage."""
    return _C._share_storage(storage)


def new_shared_device(device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
                      ref_counter_offset, event_handle, event_sync_required) -> torch.UntypedStorage:
    """A storage over the foo memory another process shared (CUDA's ``_new_shared_cuda``); the current stream of
    ``device`` waits for the sender's work queued before it shared."""
    _lazy_init()
    return _C._new_shared_storage(device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
                                  ref_counter_offset, event_handle, event_sync_required)


def release_ipc_counter_device(ref_counter_handle, ref_counter_offset) -> None:
    """Gives back the reference counter of a send whose storage this process holds already."""
    _C._release_ipc_counter(ref_counter_handle, ref_counter_offset)


def _shared_storage(device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
                    ref_counter_offset, event_handle, event_sync_required) -> torch.UntypedStorage:
    # One storage per shared memory per process, as for CUDA: a second arrival reuses it and gives its counter
    # back. (The sender registers what it sends too: a tensor sent to its own process comes back as itself.)
    _lazy_init()  # in a child forked after foo was initialised, raises the bad-fork error (its cache is the parent's)
    if handle is None or storage_size_bytes == 0:
        return torch.UntypedStorage(0, device=torch.device(DEVICE_TYPE, device))
    key = (handle, storage_offset_bytes)
    storage = reductions.storage_from_cache(torch.UntypedStorage, key)
    if storage is None:
        storage = new_shared_device(device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
                                    ref_counter_offset, event_handle, event_sync_required)
        reductions.shared_cache[key] = reductions.StorageWeakRef(storage)
    else:
        release_ipc_counter_device(ref_counter_handle, ref_counter_offset)
    return storage


def rebuild_device_tensor(tensor_cls, tensor_size, tensor_stride, tensor_offset, dtype, requires_grad, *shared):
    storage = _shared_storage(*shared)
    tensor = torch._utils._rebuild_tensor(
        torch.storage.TypedStorage(wrap_storage=storage.untyped(), dtype=dtype, _internal=True),
        tensor_offset, tensor_size, tensor_stride)
    if tensor_cls is torch.nn.Parameter:
        # As for CUDA: an integer tensor must get requires_grad=False through the constructor.
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad = requires_grad
    return tensor


def rebuild_device_storage(*shared) -> torch.UntypedStorage:
    return _shared_storage(*shared)


def _send(storage: torch.UntypedStorage) -> tuple:
    shared = share_device(storage)
    if shared[1] is not None:
        reductions.shared_cache[(shared[1], shared[3])] = reductions.StorageWeakRef(storage)
    return shared


def _reduce_tensor(tensor):
    if tensor.device.type != DEVICE_TYPE or tensor.layout != torch.strided or tensor.is_nested:
        return reductions.reduce_tensor(tensor)  # sparse and nested foo tensors: their components' storages
    if tensor.requires_grad and not tensor.is_leaf:
        return reductions.reduce_tensor(tensor)  # PyTorch's error: autograd does not cross processes
    torch.utils.hooks.warn_if_has_hooks(tensor)
    shared = _send(tensor.untyped_storage())
    return rebuild_device_tensor, (type(tensor), tensor.size(), tensor.stride(), tensor.storage_offset(),
                                   tensor.dtype, tensor.requires_grad, *shared)


def _reduce_storage(storage):
    if storage.device.type != DEVICE_TYPE:
        return reductions.reduce_storage(storage)
    return rebuild_device_storage, _send(storage)


def rebuild_event(device, handle):
    return Event.from_ipc_handle(device, handle)


def _reduce_event(event):
    return rebuild_event, (event.device, event.ipc_handle())


def register_reductions() -> None:
    """Route foo tensors, storages and events through the sharing reducers above; others keep PyTorch's."""
    for cls in (torch.Tensor, torch.nn.Parameter, *torch._tensor_classes):
        reduction.register(cls, _reduce_tensor)
    reduction.register(torch.UntypedStorage, _reduce_storage)
    reduction.register(Event, _reduce_event)
