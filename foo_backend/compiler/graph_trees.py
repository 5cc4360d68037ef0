r"""``torch.compile(mode="reduce-overhead")`` on foo: Inductor's graph trees record and replay foo graphs.

Inductor's graph trees (``torch/_inductor/cudagraph_trees.py``) warm a compiled function up, record it as a
graph in a private memory pool shared by the whole tree, and replay it; they are written against
``torch.cuda`` and CUDA's allocator functions of ``torch._C``. PyTorch is moving to a device-generic form of
the same file, in which the backend supplies the graph and allocator operations; this module is that shape
for foo on the releases that lack it: :class:`GraphTreesTorch` is the ``torch`` the file sees, in which
``torch.cuda`` answers with foo's graphs, streams and memory (:class:`FooAsCuda`) and ``torch._C``'s CUDA
allocator functions with foo's caching allocator (:class:`FooAllocatorAsCudas`); everything else is
PyTorch's. The file's one other CUDA assumption, that graph outputs are ``Tensor.is_cuda``, reads
``Tensor.is_foo`` instead.

``bind()`` (the ``"graph_trees_on_foo"`` patch) executes PyTorch's own file (and that of the control-flow
modes it enters) again in its module with those two changes, so that every caller (``compile_fx``,
``torch.compiler.cudagraph_mark_step_begin``, the resets of ``torch._dynamo``) reaches foo's trees through its
usual name: nothing is copied. Inductor's check that a graph is on one CUDA device lets one foo device
through (for Dynamo's ``backend="cudagraphs"`` too), its graph partitions keep foo's work in as a GPU's, and
it logs why a foo graph runs without graphs as it logs a CUDA graph's (one more patch per release).
The trees of a process serve one device type, keyed by device index as PyTorch keeps them, so foo takes them
only where CUDA is not available; on a machine with a GPU they stay CUDA's and foo's reduce-overhead runs
without graphs.
"""
import ast
import inspect
import types

import torch
from torch._inductor import cudagraph_utils
from torch._inductor import scheduler as inductor_scheduler

from .. import _patches
from .._utils import _C, DEVICE_TYPE

__all__ = ["FooAsCuda", "FooAllocatorAsCudas", "GraphTreesTorch", "bind"]


class FooAsCuda:
    """``torch.cuda`` as graph trees use it, answered by ``torch.foo``: the names are the same but for the
    graph class."""

    CUDAGraph = torch.foo.FooGraph

    def __getattr__(self, name):
        value = getattr(torch.foo, name)
        setattr(self, name, value)  # found directly from now on: the trees read these at every replay
        return value


def _tensor_from_storage_and_metadata(metadata, storage):
    """A tensor over ``storage`` with the size, stride, offset and dtype of ``metadata`` (what graph trees
    return as a replay's outputs: views of the pool's memory)."""
    tensor = torch.empty((0,), dtype=metadata["dtype"], device=storage.device)
    return tensor.set_(storage, metadata["storage_offset"], metadata["size"], metadata["stride"])


def _tensors_data_ptrs_at_indices_equal(tensors, data_ptrs, indices):
    """Whether ``tensors[i].data_ptr() == data_ptrs[i]`` for each index (None matches nothing)."""
    for index in indices:
        tensor = tensors[index]
        if tensor is None or tensor.data_ptr() != data_ptrs[index]:
            return False
    return True


# What graph trees call in torch._C that only CUDA's builds have (CUDA's allocator and storage functions), by
# name: foo's answer to each.
CUDA_FUNCTIONS_ANSWERED = {
    "_cuda_getCheckpointState": _C._get_checkpoint_state,
    "_cuda_setCheckpointPoolState": _C._set_checkpoint_pool_state,
    "_cuda_checkPoolLiveAllocations": _C._check_pool_live_allocations,
    "_cuda_beginAllocateCurrentThreadToPool": _C._begin_allocate_current_thread_to_pool,
    "_cuda_endAllocateToPool": _C._end_allocate_to_pool,
    "_cuda_releasePool": _C._release_pool,
    "_cuda_isHistoryEnabled": _C._is_history_enabled,
    "_cuda_cudaCachingAllocator_raw_delete": _C._caching_allocator_delete,
    "_has_Standard_Deleter": _C._has_standard_deleter,
    "_free_And_Remove_DeleterFn": _C._free_and_remove_deleter_fn,
    "_set_storage_access_error_msg": _C._set_storage_access_error_msg,
    "_set_storage_data_ptr_access_error_msg": _C._set_storage_data_ptr_access_error_msg,
    "_construct_CUDA_Tensor_From_Storage_And_Metadata": _tensor_from_storage_and_metadata,
    "_tensors_data_ptrs_at_indices_equal": _tensors_data_ptrs_at_indices_equal,
    # foo keeps no cuBLAS workspaces for a recording to clear, and has no cuDNN benchmark cache to empty.
    "_cuda_clearCublasWorkspaces": lambda: None,
    "_cuda_get_conv_benchmark_empty_cache": lambda: False,
    "_cudnn_set_conv_benchmark_empty_cache": lambda enabled: None,
}


class FooAllocatorAsCudas:
    """``torch._C`` as graph trees use it: CUDA's functions answered by foo's (``CUDA_FUNCTIONS_ANSWERED``),
    everything else PyTorch's own."""

    def __init__(self):
        vars(self).update(CUDA_FUNCTIONS_ANSWERED)

    def __getattr__(self, name):
        value = getattr(torch._C, name)
        setattr(self, name, value)  # found directly from now on
        return value


class GraphTreesTorch(types.ModuleType):
    """The ``torch`` graph trees see: PyTorch's, but for ``cuda``, ``_C`` and ``device`` (an index is a foo
    device's)."""

    cuda = FooAsCuda()
    _C = FooAllocatorAsCudas()

    def __init__(self):
        super().__init__("torch")

    @staticmethod
    def device(device, index=None):
        if isinstance(device, int):
            return torch.device(DEVICE_TYPE, device)
        return torch.device(device) if index is None else torch.device(device, index)

    def __getattr__(self, name):
        value = getattr(torch, name)
        setattr(self, name, value)
        return value


class _ReadIsFoo(ast.NodeTransformer):
    """Rewrites ``<tensor>.is_cuda`` into ``<tensor>.is_foo``, counting the rewrites."""

    def __init__(self):
        self.rewritten = 0

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr == "is_cuda":
            self.rewritten += 1
            node.attr = f"is_{DEVICE_TYPE}"
        return node


def _compiled_with(module, rewrite):
    """The code of a PyTorch module's file, compiled (under the file's name) after ``rewrite`` visited it."""
    tree = rewrite.visit(ast.parse(inspect.getsource(module)))
    return compile(ast.fix_missing_locations(tree), module.__file__, "exec")


def _code_reading_is_foo(module):
    """The code of a PyTorch module's file with ``is_cuda`` read as ``is_foo``; the number of rewrites."""
    rewrite = _ReadIsFoo()
    return _compiled_with(module, rewrite), rewrite.rewritten


def _run_again_on_foo(module, graph_trees_torch):
    """Executes a PyTorch module's file again in its module, on foo (see the module's docstring)."""
    code, _ = _code_reading_is_foo(module)
    exec(code, module.__dict__)  # noqa: S102  (PyTorch's own file)
    module.torch = graph_trees_torch


def _bind_graph_trees_to_foo():
    """The ``"graph_trees_on_foo"`` patch: PyTorch's graph trees and the control-flow modes they enter during
    warm-up and recording, executed again in place with ``torch`` bound to :class:`GraphTreesTorch` and
    ``is_cuda`` read as ``is_foo``; Inductor's device check for graphs lets one foo device through, Dynamo's
    ``backend="cudagraphs"`` takes a foo device's index, and graph partitions keep foo nodes in as a GPU's.
    Returns PyTorch's functions it replaced (the modules' code is their files')."""
    from torch._dynamo.backends import cudagraphs as cudagraphs_backend
    from torch._higher_order_ops import cudagraph_conditional_nodes
    from torch._inductor import cudagraph_trees

    # The control-flow modes first: the trees import their classes by name. Both see one torch.
    graph_trees_torch = GraphTreesTorch()
    _run_again_on_foo(cudagraph_conditional_nodes, graph_trees_torch)
    _run_again_on_foo(cudagraph_trees, graph_trees_torch)

    check = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes

    def check_devices_for_foo_graphs(device_node_mapping):
        reason = check(device_node_mapping)
        # PyTorch's check accepts one CUDA device and leaves the devices it did not discard in the mapping.
        devices = list(device_node_mapping)
        if reason is not None and len(devices) == 1 and devices[0].type == DEVICE_TYPE:
            return None
        return reason

    # Inductor's lowering check calls it by its module's name.
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_devices_for_foo_graphs
    # Dynamo's "cudagraphs" backend (graph trees over AOT graphs, without Inductor) imports the check by name,
    # and asks a CUDA device's index.
    cudagraphs_backend.check_multiple_devices_or_any_cpu_nodes = check_devices_for_foo_graphs
    device_index = cudagraphs_backend.get_device_index

    def device_index_of_foo_graphs(graph_module):
        device = next(iter(cudagraphs_backend.get_device_node_mapping(graph_module)))
        return device.index if device.type == DEVICE_TYPE else device_index(graph_module)

    cudagraphs_backend.get_device_index = device_index_of_foo_graphs

    should_partition = inductor_scheduler.Scheduler.should_partition

    def partition_as_on_a_gpu(scheduler, node):
        # A node that is not a GPU's is partitioned out of the graphs; a foo node is kept in, unless the
        # checks that follow for a GPU's node say otherwise.
        device = node.get_device()
        if isinstance(node, inductor_scheduler.FusedSchedulerNode) or device is None or device.type != DEVICE_TYPE:
            return should_partition(scheduler, node)
        node.is_gpu = lambda: True
        try:
            return should_partition(scheduler, node)
        finally:
            del node.is_gpu

    inductor_scheduler.Scheduler.should_partition = partition_as_on_a_gpu
    return check, device_index, should_partition


class _GraphDeviceTypesIncludeFoo(ast.NodeTransformer):
    """Rewrites ``"cuda" in <graph>.device_types`` into ``("cuda" in ... or "foo" in ...)``, recording the
    qualified names of the functions rewritten."""

    def __init__(self):
        self.scopes, self.rewritten = [], []

    def _visit_scope(self, node):
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()
        return node

    visit_ClassDef = visit_FunctionDef = _visit_scope

    def visit_Compare(self, node):
        self.generic_visit(node)
        operand = node.comparators[0]
        if not (isinstance(node.left, ast.Constant) and node.left.value == "cuda" and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In) and isinstance(operand, ast.Attribute)
                and operand.attr == "device_types"):
            return node
        self.rewritten.append(".".join(self.scopes))
        on_foo = ast.Compare(left=ast.Constant(DEVICE_TYPE), ops=[ast.In()], comparators=[operand])
        return ast.copy_location(ast.BoolOp(op=ast.Or(), values=[node, on_foo]), node)


def _functions_by_qualname(code):
    """The code objects of the functions defined in ``code`` (a module's), at every depth, by qualified name."""
    found = {}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found[constant.co_qualname] = constant
            found.update(_functions_by_qualname(constant))
    return found


def _skips_of_foo_graphs_in_code():
    """Where Inductor 2.13 logs why a graph runs without graphs: PyTorch's ``output_code`` functions that ask
    ``"cuda" in <graph>.device_types``, by qualified name, each with its code asking for foo too."""
    from torch._inductor import output_code

    rewrite = _GraphDeviceTypesIncludeFoo()
    functions = _functions_by_qualname(_compiled_with(output_code, rewrite))
    return {qualname: functions[qualname] for qualname in rewrite.rewritten}


def _log_skips_of_foo_graphs_by_device_types():
    """The ``"graph_skips_logged_by_device_types"`` patch (2.13). Inductor logs (and counts, and raises under
    ``triton.cudagraph_or_error``) why a graph runs without graphs only where the graph has a CUDA device
    (``"cuda" in device_types``); for any other device it counts the skip silently. The functions that ask
    take the code of their own source with foo asked too (their objects stay PyTorch's, for every importer).
    Returns PyTorch's code objects, by qualified name."""
    from torch._inductor import output_code

    replaced = {}
    for qualname, code in _skips_of_foo_graphs_in_code().items():
        owner = output_code
        for name in qualname.split(".")[:-1]:
            owner = getattr(owner, name)
        function = vars(owner)[qualname.rsplit(".", 1)[-1]]
        replaced[qualname], function.__code__ = function.__code__, code
    return replaced


def _log_skips_of_foo_graphs_as_gpus():
    """The ``"graph_skips_logged_as_gpus"`` patch (2.14). Inductor logs why a graph runs without graphs only
    where one of its devices ``is_gpu`` (imported by name): foo's graphs are logged as a GPU's. Returns
    PyTorch's function."""
    from torch._inductor import output_code

    is_gpu = output_code.is_gpu
    output_code.is_gpu = lambda device: device == DEVICE_TYPE or is_gpu(device)
    return is_gpu


def bind():
    """Give Inductor's graph trees to foo, once, unless CUDA is available (see the module's docstring)."""
    if torch.cuda.is_available():
        return False
    for patch in ("graph_skips_logged_by_device_types", "graph_skips_logged_as_gpus"):  # one per release
        _patches.apply(patch)
    return _patches.apply("graph_trees_on_foo")
