"""What Dynamo asks of foo: its ``DeviceInterface`` and the stream functions it records in graphs.

Importing this module registers foo with Dynamo. ``foo_backend.compiler`` imports it right after
``torch._dynamo`` itself, before Dynamo traces anything (Dynamo reads the registered interfaces when it first
meets a stream); imported first, it imports ``torch._dynamo`` and registers all the same.
"""
import contextlib

import torch
from torch._dynamo import device_interface
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree

from .. import _patches
from .._utils import _C, DEVICE_TYPE


def get_raw_stream(device_index):
    """The runtime handle of the current stream (what compiled code passes to a GPU kernel launch)."""
    return torch.foo.current_stream(device_index).stream_id


class FooInterface(device_interface.DeviceInterface):
    """What Dynamo and Inductor ask of a device."""

    device = torch.foo.device
    Event = torch.foo.Event
    Stream = torch.foo.Stream

    class Worker:
        @staticmethod
        def set_device(device):
            device_interface.caching_worker_current_devices[DEVICE_TYPE] = device

        @staticmethod
        def current_device():
            return device_interface.caching_worker_current_devices.get(DEVICE_TYPE, torch.foo.current_device())

        @staticmethod
        def get_device_properties(device=None):
            return torch.foo.get_device_properties(device)

    current_device = staticmethod(torch.foo.current_device)
    set_device = staticmethod(torch.foo.set_device)
    device_count = staticmethod(torch.foo.device_count)
    stream = staticmethod(torch.foo.stream)
    current_stream = staticmethod(torch.foo.current_stream)
    set_stream = staticmethod(torch.foo.set_stream)
    synchronize = staticmethod(torch.foo.synchronize)
    get_device_properties = staticmethod(torch.foo.get_device_properties)
    get_raw_stream = staticmethod(get_raw_stream)
    memory_allocated = staticmethod(torch.foo.memory_allocated)
    is_bf16_supported = staticmethod(torch.foo.is_bf16_supported)

    # What torch.foo.device enters and leaves with.
    exchange_device = staticmethod(_C._exchange_device)
    maybe_exchange_device = staticmethod(_C._exchange_device)

    @staticmethod
    def is_available():
        return torch.foo.is_available()

    @staticmethod
    def get_compute_capability(device=None):
        major, minor = torch.foo.get_device_capability(device)
        return major * 10 + minor

    @staticmethod
    def is_triton_capable(device=None):
        return False


def _patch_fake_convolution():
    """The ``"fake_convolution"`` patch. PyTorch's fake convolution gives a PrivateUse1 convolution contiguous
    outputs (it cannot know the layout of an overridden kernel), but foo's convolution is CPU's and has CPU's
    layouts (channels_last in, channels_last out): Inductor would lay out a compiled CNN for the wrong strides.
    On foo tensors it asks CPU's fake convolution. Returns PyTorch's fake convolution."""
    convolution = fake_impls.op_implementations_dict[torch.ops.aten.convolution.default]

    def move(fake_mode, value, device):
        if not isinstance(value, FakeTensor):
            return value
        with fake_mode:  # a fake tensor of the same shape and strides on the other device, never allocated
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)

    def foo_convolution(fake_mode, func, *args, **kwargs):
        devices = {t.fake_device for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, FakeTensor)}
        foo_devices = [device for device in devices if device.type == DEVICE_TYPE]
        if not foo_devices:
            return convolution(fake_mode, func, *args, **kwargs)
        cpu_args, cpu_kwargs = pytree.tree_map(lambda t: move(fake_mode, t, "cpu"), (args, kwargs))
        outputs = convolution(fake_mode, func, *cpu_args, **cpu_kwargs)
        return pytree.tree_map(lambda t: move(fake_mode, t, foo_devices[0]), outputs)

    for op, impl in list(fake_impls.op_implementations_dict.items()):
        if impl is convolution:  # convolution, _convolution, convolution_backward
            fake_impls.op_implementations_dict[op] = foo_convolution
    return convolution


def _patch_in_graph_classes():
    """The ``"dynamo_stream_classes"`` patch. Dynamo 2.13 knows the stream and event classes of CUDA and XPU
    by name: with foo's added to its (cached) set of classes, creating a ``torch.foo.Stream`` or ``Event`` in
    compiled code makes a graph object. Replaces nothing: returns None."""
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    UserDefinedClassVariable._in_graph_classes().update({torch.foo.Stream, torch.foo.Event})


def _patch_current_stream_handler():
    """The ``"dynamo_current_stream"`` patch. Dynamo 2.13 knows the ``current_stream`` functions of CUDA and
    XPU by name: given ``torch.accelerator.current_stream``'s handler, ``torch.foo.current_stream()`` returns
    the stream Dynamo tracks as current, as ``torch.cuda.current_stream()`` does. Returns the handler it
    replaced (None: Dynamo had none)."""
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    handlers = TorchInGraphFunctionVariable._get_handlers()
    replaced = handlers.get(torch.foo.current_stream)
    handlers[torch.foo.current_stream] = handlers[torch.accelerator.current_stream]
    return replaced


def _patch_preserve_rng_state():
    """The ``"dynamo_preserve_rng_state"`` patch. Dynamo's ``preserve_rng_state``, around the work PyTorch runs
    to compile or record (AOT Autograd's tracing, Inductor's warm-ups, graph trees' recordings), restores the
    generators of CPU, CUDA and XPU only: with foo's current device's restored too, that work leaves foo's
    random numbers where they were, as it leaves CUDA's. Returns PyTorch's function."""
    from torch._dynamo import utils as dynamo_utils

    preserve = dynamo_utils.preserve_rng_state

    def foo_rng_state():
        with torch.utils._python_dispatch._disable_current_modes(), torch._C._DisableFuncTorch():
            return torch.foo.get_rng_state() if torch.foo.is_available() else None

    @contextlib.contextmanager
    def preserve_rng_state_with_foos():
        with preserve():
            state = foo_rng_state()
            try:
                yield
            finally:
                if state is not None:
                    with torch.utils._python_dispatch._disable_current_modes():
                        torch.foo.set_rng_state(state)

    # Inductor reads it from the module at each use (graph trees import it when they are given to foo, after
    # this). AOT Autograd's copy of the name guards only tracing with fake tensors, which draws no numbers.
    dynamo_utils.preserve_rng_state = preserve_rng_state_with_foos
    return preserve


def _run_and_save_rng_state_on_foo(op, *args, **kwargs):
    return torch.foo.get_rng_state(), op(*args, **kwargs)


def _run_with_rng_state_on_foo(rng_state, op, *args, **kwargs):
    current = torch.foo.get_rng_state()
    torch.foo.set_rng_state(rng_state.cpu())
    try:
        return op(*args, **kwargs)
    finally:
        torch.foo.set_rng_state(current)


def _patch_rng_state_operators():
    """The ``"rng_state_operators_on_foo"`` patch. A random operator that activation checkpointing recomputes
    in the backward is made to draw its forward's numbers again: AOT Autograd runs it under the
    higher-order operators ``run_and_save_rng_state`` (forward) and ``run_with_rng_state`` (backward), which
    have a kernel for CPU, CUDA, HPU and XPU, and a table of those devices for tensors of no key (fake and
    traced ones) that refuses any other ("Backend not supported for foo"). foo gets a kernel of its key
    (``PrivateUse1``, as CUDA's on foo's generator) and a place in the table, which the two operators' fake
    and tracing functions find in their closures. Returns PyTorch's table functions."""
    from torch._C import DispatchKey
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

    save, run_with = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    save.py_impl(DispatchKey.PrivateUse1)(_run_and_save_rng_state_on_foo)
    run_with.py_impl(DispatchKey.PrivateUse1)(_run_with_rng_state_on_foo)
    select_save = save.py_kernels[DispatchKey.BackendSelect]
    select_run_with = run_with.py_kernels[DispatchKey.BackendSelect]

    def select_save_with_foo(op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) == DEVICE_TYPE:
            return _run_and_save_rng_state_on_foo(op, *args, **kwargs)
        return select_save(op, *args, **kwargs)

    def select_run_with_with_foo(rng_state, op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) == DEVICE_TYPE:
            return _run_with_rng_state_on_foo(rng_state, op, *args, **kwargs)
        return select_run_with(rng_state, op, *args, **kwargs)

    save.py_kernels[DispatchKey.BackendSelect] = select_save_with_foo
    run_with.py_kernels[DispatchKey.BackendSelect] = select_run_with_with_foo
    for function in (registered_hop_fake_fns[save], save.python_key_table[ProxyTorchDispatchMode]):
        cell = function.__closure__[function.__code__.co_freevars.index("impl_backend_select")]
        cell.cell_contents = select_save_with_foo
    return select_save, select_run_with


def _register():
    device_interface.register_interface_for_device(DEVICE_TYPE, FooInterface)
    for index in range(torch.foo.device_count()):
        device_interface.register_interface_for_device(f"{DEVICE_TYPE}:{index}", FooInterface)
    # As torch.cuda's: calls in the graph rather than Python to trace through.
    torch.compiler.allow_in_graph([torch.foo.current_stream, torch.foo.stream])
    _patches.apply("dynamo_stream_classes")
    _patches.apply("dynamo_current_stream")
    _patches.apply("fake_convolution")
    _patches.apply("dynamo_preserve_rng_state")
    _patches.apply("rng_state_operators_on_foo")


_register()
