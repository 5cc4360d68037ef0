"""Sending foo tensors to other processes with ``torch.multiprocessing``.

CUDA shares device memory between processes through IPC handles. foo's memory is private to the
process that mapped it, so a foo tensor travels *by copy*: its bytes are serialized with the message
(``torch.save`` format, not shared memory, so the sender need not keep anything alive) and rebuilt on
the same foo device index in the receiving process, which must be a spawned or forkserver process
since a forked child cannot use foo. Changes the receiver makes are not seen by the sender.
"""
import io
from multiprocessing import reduction

import torch
from torch.multiprocessing import reductions

from ._utils import DEVICE_TYPE


def _serialize(host_object) -> bytes:
    buffer = io.BytesIO()
    torch.save(host_object, buffer)
    return buffer.getvalue()


def _deserialize(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


def _rebuild_foo_tensor(cls, data, device, requires_grad):
    tensor = _deserialize(data).to(device)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def _rebuild_foo_storage(data, device):
    storage = _deserialize(data)  # torch.load gives a storage back as a TypedStorage
    return storage.untyped().to(device=device)


def _reduce_tensor(tensor):
    if tensor.device.type != DEVICE_TYPE:
        return reductions.reduce_tensor(tensor)
    data = _serialize(tensor.detach().cpu())
    return _rebuild_foo_tensor, (type(tensor), data, tensor.device, tensor.requires_grad)


def _reduce_storage(storage):
    if storage.device.type != DEVICE_TYPE:
        return reductions.reduce_storage(storage)
    return _rebuild_foo_storage, (_serialize(storage.cpu()), storage.device)


def register_reductions() -> None:
    """Route foo tensors and storages through the copying reducers above; others keep PyTorch's."""
    for cls in (torch.Tensor, torch.nn.Parameter, *torch._tensor_classes):
        reduction.register(cls, _reduce_tensor)
    reduction.register(torch.UntypedStorage, _reduce_storage)
