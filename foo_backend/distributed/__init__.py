r"""torch.distributed on foo: the c10d backend ``"fccl"``.

Importing foo_backend (which ``import torch`` does) registers it as the default backend of device type
``"foo"``, so every usual way of starting works::

    dist.init_process_group()                      # foo is the accelerator: fccl for foo tensors (and CPU's on 2.13)
    dist.init_process_group("fccl")
    dist.init_process_group("cpu:gloo,foo:fccl")
    dist.init_process_group(device_id=torch.device("foo", local_rank))

fccl runs gloo over TCP on the device memory itself (kernel views, no staging copies), with NCCL's stream
semantics: a collective sees the work queued on the current stream when it is issued, and ``Work.wait()``
makes the current stream wait for it without blocking the host. CPU tensors in an fccl group go to a
gloo group of their own, from the host (as they do beside NCCL in a ``"cpu:gloo,cuda:nccl"`` group).
"""
import functools

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from .. import _patches
from .._utils import _C

BACKEND_NAME = "fccl"
ProcessGroupFoo = _C.ProcessGroupFoo


def _create_backend(store, rank, world_size, timeout):
    """The backend of one process group: two gloo groups on the group's store, one driven from foo's
    streams for foo tensors, one from the host for CPU tensors (gloo pairs the ranks' collectives by the
    order they reach a group, and stream order is not host order)."""
    device_gloo = dist.ProcessGroupGloo(dist.PrefixStore("foo/", store), rank, world_size, timeout)
    host_gloo = dist.ProcessGroupGloo(dist.PrefixStore("cpu/", store), rank, world_size, timeout)
    return ProcessGroupFoo(device_gloo, host_gloo, rank, world_size, timeout)


def _register():
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["foo", "cpu"])
    _patches.apply("unnamed_process_group_backend")


def _default_to_fccl_when_unnamed():
    """The ``"unnamed_process_group_backend"`` patch (``foo_backend._patches``). ``init_process_group()``
    without a backend on a machine whose accelerator is foo: PyTorch 2.13 maps foo to its default backend
    (fccl) but marks the group's default backend type as gloo, which the group does not have, so
    ``get_backend`` and friends fail. Name fccl instead, as if the user had. (2.14 marks the default from the
    group's backends, as for CUDA's unnamed group, and needs no patch.) Returns the function it wrapped."""
    original = distributed_c10d._new_process_group_helper
    if getattr(original, "_foo_wrapped", False):
        return original.__wrapped__

    @functools.wraps(original)
    def new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        if str(backend) == dist.Backend.UNDEFINED and torch._C._get_accelerator().type == "foo":
            backend = dist.Backend(BACKEND_NAME)
        return original(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)

    new_process_group_helper._foo_wrapped = True
    distributed_c10d._new_process_group_helper = new_process_group_helper
    return original
