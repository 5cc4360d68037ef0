r"""Every patch foo_backend makes to PyTorch, declared in one place.

PyTorch offers no hook for a few things foo needs, so foo replaces or extends some of its objects. Each entry
of ``PATCHES`` says what it patches, why, for which torch releases (``"major.minor"``), which function applies
it (in the subsystem it belongs to: memory, distributed, compiler) and which test guards it: the test that
fails loudly if PyTorch changes what the patch works around or replaces, so that the patch is reviewed
(dropped, or its releases extended).

A subsystem applies its patch with ``apply(name)`` where and when it needs it, at import, when
``torch._dynamo`` is imported, or when Inductor first compiles for foo (``when``), and the registry's one
version guard (``applies``) skips it on other releases. Each function that applies a patch returns what it
replaced (``upstream(name)``, for the guard tests), or None when the patch only adds to a PyTorch table.

Adding a patch: write its function in its subsystem, declare it here, call ``apply`` where it is due, and
write its guard test (``tests/test_patches.py`` checks that every entry names one).
"""
import dataclasses
import importlib
from typing import Any

import torch

from . import _releases


@dataclasses.dataclass(frozen=True)
class Patch:
    """One patch of PyTorch."""

    targets: tuple[str, ...]  # the PyTorch objects it replaces or changes, by their dotted paths
    why: str  # one line
    releases: tuple[str, ...]  # the torch releases ("major.minor") it is applied on
    guard: str  # "tests/<file>.py::<test>": the test that fails if PyTorch changes the patched thing
    apply: str  # "<module>:<function>" that applies it and returns what it replaced
    when: str  # when it is applied


_INDUCTOR_GUARD = "tests/test_inductor.py::test_inductor_assumptions_foo_patches_work_around"
_ON_DYNAMO_IMPORT = "right after torch._dynamo is imported (foo_backend.compiler)"
_ON_FIRST_COMPILE = "when Inductor first compiles for foo (foo_backend.compiler.inductor.register)"
_WITH_GRAPH_TREES = ("when torch._inductor.cudagraph_trees is first imported (foo_backend.compiler) or Inductor "
                     "first compiles for foo, unless CUDA is available")

PATCHES: dict[str, Patch] = {
    "default_dtype_setters": Patch(
        targets=("torch._C._set_default_dtype", "torch._C._set_default_tensor_type"),
        why="a queued CPU kernel reads the process-wide default dtype when it runs: changing it drains foo first",
        releases=("2.13", "2.14"),
        guard="tests/test_async_execution.py::test_the_default_dtype_setters_are_the_ones_foo_wraps",
        apply="foo_backend:_drain_queues_before_default_dtype_changes",
        when="at import (foo_backend._register)",
    ),
    "accelerator_snapshot": Patch(
        targets=("torch.accelerator.memory._snapshot",),
        why="PyTorch's knows XPU and otherwise asks CUDA: it returns foo's snapshot when foo is the accelerator",
        releases=("2.13", "2.14"),
        guard="tests/test_memory.py::test_the_accelerator_snapshot_patch_is_still_needed",
        apply="foo_backend.memory:_route_accelerator_snapshot",
        when="at import (foo_backend._register)",
    ),
    "unnamed_process_group_backend": Patch(
        targets=("torch.distributed.distributed_c10d._new_process_group_helper",),
        why="init_process_group() without a backend marks a foo group's default backend gloo: it names fccl",
        releases=("2.13",),
        guard="tests/test_distributed.py::test_the_unnamed_backend_workaround_matches_this_torch",
        apply="foo_backend.distributed:_default_to_fccl_when_unnamed",
        when="at import, when torch.distributed is available (foo_backend.distributed._register)",
    ),
    "dynamo_stream_classes": Patch(
        targets=("torch._dynamo.variables.user_defined.UserDefinedClassVariable._in_graph_classes",),
        why="Dynamo knows CUDA's and XPU's stream and event classes by name: foo's are added to its cached set",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.dynamo:_patch_in_graph_classes",
        when=_ON_DYNAMO_IMPORT,
    ),
    "dynamo_current_stream": Patch(
        targets=("torch._dynamo.variables.torch.TorchInGraphFunctionVariable._get_handlers",),
        why="Dynamo knows CUDA's current_stream by name: torch.foo.current_stream gets torch.accelerator's handler",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.dynamo:_patch_current_stream_handler",
        when=_ON_DYNAMO_IMPORT,
    ),
    "fake_convolution": Patch(
        targets=("torch._subclasses.fake_impls.op_implementations_dict",),
        why="fake tensors lay out a PrivateUse1 convolution's output contiguous: foo's ask CPU's fake convolution",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.dynamo:_patch_fake_convolution",
        when=_ON_DYNAMO_IMPORT,
    ),
    "dynamo_preserve_rng_state": Patch(
        targets=("torch._dynamo.utils.preserve_rng_state",),
        why="compiling and recording restore CPU's, CUDA's and XPU's generators afterwards: foo's too",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.dynamo:_patch_preserve_rng_state",
        when=_ON_DYNAMO_IMPORT,
    ),
    "rng_state_operators_on_foo": Patch(
        targets=("torch._prims.rng_prims.run_and_save_rng_state", "torch._prims.rng_prims.run_with_rng_state"),
        why="the operators that replay a recomputed random operator's numbers know CPU, CUDA, HPU and XPU only",
        releases=("2.13", "2.14"),
        guard="tests/test_inductor.py::test_rng_state_operators_know_the_devices_foo_is_added_to",
        apply="foo_backend.compiler.dynamo:_patch_rng_state_operators",
        when=_ON_DYNAMO_IMPORT,
    ),
    "inductor_current_backend": Patch(
        targets=tuple(f"{module}.get_current_backend" for module in (
            "torch._inductor.utils", "torch._inductor.codegen.common", "torch._inductor.scheduler",
            "torch._inductor.kernel.mm_common")),
        why="Inductor answers Triton for a device it does not know: foo's code generator is the CPU's",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.inductor:_patch_get_current_backend",
        when=_ON_FIRST_COMPILE,
    ),
    "inductor_is_cpu": Patch(
        targets=("torch._inductor.scheduler.BaseSchedulerNode.is_cpu",),
        why="the scheduler skips what the C++ code generator does not support for CPU nodes only: foo's too",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.inductor:_patch_is_cpu",
        when=_ON_FIRST_COMPILE,
    ),
    "inductor_lowering_is_gpu": Patch(
        targets=("torch._inductor.lowering.is_gpu",),
        why="a pointwise op runs on its first input's device unless another is a GPU's: foo inputs decide too",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.inductor:_patch_lowering_is_gpu",
        when=_ON_FIRST_COMPILE,
    ),
    "inductor_device_need_guard": Patch(
        targets=("torch._inductor.scheduler.device_need_guard",),
        why="compiled code enters a GPU's device (its buffers are allocated there), not another device's: foo's too",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.inductor:_patch_device_need_guard",
        when=_ON_FIRST_COMPILE,
    ),
    "inductor_cpp_wrapper_header": Patch(
        targets=("torch._inductor.codecache._get_cpp_wrapper_header",),
        why="Inductor precompiles its device's C++ wrapper header, which PyTorch ships for its own devices: foo's "
            "wrapper is compiled as the CPU's",
        releases=("2.13", "2.14"),
        guard=_INDUCTOR_GUARD,
        apply="foo_backend.compiler.inductor:_patch_cpp_wrapper_header",
        when=_ON_FIRST_COMPILE,
    ),
    "graph_trees_on_foo": Patch(
        targets=("torch._inductor.cudagraph_trees", "torch._higher_order_ops.cudagraph_conditional_nodes",
                 "torch._inductor.cudagraph_utils.check_multiple_devices_or_any_cpu_nodes",
                 "torch._dynamo.backends.cudagraphs.check_multiple_devices_or_any_cpu_nodes",
                 "torch._dynamo.backends.cudagraphs.get_device_index",
                 "torch._inductor.scheduler.Scheduler.should_partition"),
        why="graph trees call torch.cuda and CUDA's allocator: their files run again on foo's; foo graphs pass as GPU's",
        releases=("2.13", "2.14"),
        guard="tests/test_graph_trees.py::test_graph_trees_ask_foo_exactly_what_its_adapter_answers",
        apply="foo_backend.compiler.graph_trees:_bind_graph_trees_to_foo",
        when=_WITH_GRAPH_TREES,
    ),
    "graph_skips_logged_by_device_types": Patch(
        targets=("torch._inductor.output_code.cudagraph_post_compile",
                 "torch._inductor.output_code.CompiledFxGraph.__init__",
                 "torch._inductor.output_code.CompiledFxGraph.post_compile"),
        why='Inductor logs why a graph runs without graphs only if "cuda" in its device_types: foo\'s graphs too',
        releases=("2.13",),
        guard="tests/test_graph_trees.py::test_inductor_logs_skipped_graphs_of_cuda_alone",
        apply="foo_backend.compiler.graph_trees:_log_skips_of_foo_graphs_by_device_types",
        when=_WITH_GRAPH_TREES,
    ),
    "graph_skips_logged_as_gpus": Patch(
        targets=("torch._inductor.output_code.is_gpu",),
        why="Inductor logs why a graph runs without graphs only if one of its devices is_gpu: foo's graphs too",
        releases=("2.14",),
        guard="tests/test_graph_trees.py::test_inductor_logs_skipped_graphs_of_cuda_alone",
        apply="foo_backend.compiler.graph_trees:_log_skips_of_foo_graphs_as_gpus",
        when=_WITH_GRAPH_TREES,
    ),
}

# What each applied patch replaced (None when it only added to a PyTorch table), by name.
_upstream: dict[str, Any] = {}


def torch_release() -> str:
    """The running torch's release, ``"major.minor"`` (``"2.13"`` for ``2.13.0+cpu``)."""
    return _releases.release_of(str(torch.__version__))


def applies(name: str) -> bool:
    """Whether patch ``name`` is for the running torch release: the one version guard of every patch."""
    return torch_release() in PATCHES[name].releases


# The patches being applied now: a patch's function may import the module whose import applies that patch.
_applying: set[str] = set()


def apply(name: str) -> bool:
    """Apply patch ``name`` if it is for the running torch release and not applied yet; True if it is applied
    (or being applied, when its own function led here again)."""
    if name in _upstream or name in _applying:
        return True
    if not applies(name):
        return False
    module, function = PATCHES[name].apply.split(":")
    _applying.add(name)
    try:
        _upstream[name] = getattr(importlib.import_module(module), function)()
    finally:
        _applying.discard(name)
    return True


def applied(name: str) -> bool:
    """Whether patch ``name`` has been applied in this process."""
    if name not in PATCHES:
        raise KeyError(f"foo_backend._patches has no patch {name!r}")
    return name in _upstream


def upstream(name: str) -> Any:
    """What applied patch ``name`` replaced: PyTorch's own object (None when the patch only added to a table)."""
    if not applied(name):
        raise RuntimeError(f"foo_backend's patch {name!r} is not applied (torch {torch.__version__})")
    return _upstream[name]
