r"""torch.compile on foo: Inductor generates C++ kernels for foo and launches them on foo's streams.

Imported, and registered (``register()``), the first time Inductor compiles for foo (see
``foo_backend.compiler``).

How a compiled graph runs on foo: Inductor's C++ backend (``CppScheduling``) writes the kernels, as for CPU,
and this module gives each one an entry point that takes its arguments packed in one array and compiles a
graph's kernels together (``_KernelBatch``); the graph's Python wrapper calls a
``foo_backend._C.CompiledKernel`` for each, which queues the kernel on the current stream of the tensors'
device with their device addresses translated to the kernel mapping (the host never touches device memory)
and returns at once. Buffers are allocated on the graph's device (the
wrapper enters ``torch.foo.device(i)`` as it enters ``torch.cuda._DeviceGuard(i)`` for CUDA); extern
kernels and ATen fallbacks are ordinary foo operator calls, on the same stream. Under ``cpp_wrapper``, and in
AOTInductor's models, the wrapper is C++ (``FooCppWrapperCodegen``) and makes the same launches through foo's C
functions.
"""
import ctypes
import functools
import os
import re

import torch
from torch._inductor import codecache as inductor_codecache
from torch._inductor import config as inductor_config
from torch._inductor import lowering as inductor_lowering
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor import utils as inductor_utils
from torch._inductor.async_compile import get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture
from torch._inductor.codegen import common as inductor_common
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.utils import IndentedBuffer
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.fx_passes.post_grad import ConstructorMoverPass
from torch._inductor.kernel import mm_common as inductor_mm_common
from torch._inductor.virtualized import V

from .. import _patches
from .._utils import _C, DEVICE_TYPE
from . import config, graph_trees

__all__ = ["FooScheduling", "FooWrapperCodegen", "FooCppWrapperCodegen", "MoveConstructorsToFoo", "compile_kernel",
           "register"]

# The header of foo's C functions that generated C++ code includes, by its path (its directory is on no include
# path of Inductor's compiler).
_AOTI_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include", "foo_backend",
                            "aoti.h")
# The version of foo's C functions an AOTInductor model is compiled for (include/foo_backend/aoti.h).
_ABI_VERSION = "FOO_AOTI_ABI_VERSION"
# The device name an AOTInductor model's constructor gives its base class (PyTorch 2.13, 2.14).
_MODEL_BASE_DEVICE = re.compile(r"(: AOTInductorModelBase\([^)]*?)\bdevice_str\b")
_CONSTANT_ON_FOO = re.compile(r"(constants_info_\[\d+\]\.device_type = )cached_torch_device_type_privateuse1;")
# The C++ type of each kernel parameter as it reads its slot of the packed argument array.
_POINTER_SLOT = "({type})(uintptr_t)args[{index}]"
_VALUE_SLOT = "*(const {base}*)&args[{index}]"


def _launch_entry_point(parameter_types, kernel="kernel", entry="foo_launch"):
    """``entry(args)``: calls the generated function ``kernel`` with its arguments unpacked from one array."""
    unpacked = []
    for index, type_ in enumerate(parameter_types):
        if type_.endswith("*"):
            unpacked.append(_POINTER_SLOT.format(type=type_, index=index))
        else:
            base = type_.removeprefix("const ").strip()
            unpacked.append(_VALUE_SLOT.format(base=base, index=index))
    arguments = ",\n        ".join(unpacked)
    return f'\nextern "C" void {entry}(const uint64_t* args) {{\n    {kernel}(\n        {arguments});\n}}\n'


# How Inductor's C++ source of one kernel (PyTorch 2.13) defines its function.
_KERNEL_DEFINITION = re.compile(r'extern "C"\s+void\s+kernel\(')


class _KernelBatch:
    """The foo kernels one graph's wrapper defines, compiled together the first time one is needed. Each stays
    a launch of its own, but a compiler run costs mostly the parse of Inductor's prefix header: one run per
    compile worker serves them all (CPU's kernels are fewer: Inductor fuses a CPU graph's kernels until a
    device change, foo's are launched one by one, as a GPU's). A batch that fails to compile together (two
    kernels defining the same helper) compiles its kernels one by one."""

    def __init__(self, async_compile):
        self.async_compile = async_compile
        self.kernels = []  # (name, parameter_types, source)
        self.launchers = None

    def add(self, name, parameter_types, source):
        self.kernels.append((name, parameter_types, source))
        return len(self.kernels) - 1

    def launcher(self, index):
        if self.launchers is None:
            self.launchers = self._compile()
        return self.launchers[index]

    def _compile(self):
        indices = list(range(len(self.kernels)))
        together = [i for i in indices if len(_KERNEL_DEFINITION.findall(self.kernels[i][2])) == 1]
        workers = min(get_compile_threads(), len(together))
        chunks = [together[w::workers] for w in range(workers)] if together else []
        loads = [(chunk, self._load("".join(self._renamed(i) for i in chunk))) for chunk in chunks]  # all started
        launchers = {}
        for chunk, load in loads:
            try:
                library = load()
            except Exception:  # noqa: BLE001  (a compile error: the chunk's kernels compile one by one below)
                continue
            for i in chunk:
                launchers[i] = self._wrap(i, getattr(library, f"foo_launch_{i}"))
        for i in indices:
            if i not in launchers:
                name, parameter_types, source = self.kernels[i]
                library = self._load(source + _launch_entry_point(parameter_types))()
                launchers[i] = self._wrap(i, library.foo_launch)
        return [launchers[i] for i in indices]

    def _renamed(self, index):
        _, parameter_types, source = self.kernels[index]
        function = f"foo_kernel_{index}"
        return (_KERNEL_DEFINITION.sub(f"static void {function}(", source, count=1)
                + _launch_entry_point(parameter_types, kernel=function, entry=f"foo_launch_{index}"))

    def _load(self, source):
        """A function returning the compiled library of ``source``, compiled in Inductor's workers if it has them."""
        if get_compile_threads() <= 1:
            return lambda: CppCodeCache.load(source)
        return CppCodeCache.load_async(source, submit_fn=self.async_compile.submit)

    def _wrap(self, index, entry):
        name, parameter_types, _ = self.kernels[index]
        return _C.CompiledKernel(name, ctypes.cast(entry, ctypes.c_void_p).value, parameter_types)


class _CompiledOnFirstLaunch:
    """A foo kernel whose batch compiles when it is first launched: with one compile thread, Inductor's
    wrapper waits for no futures (``AsyncCompile.wait`` does nothing), so its kernels are these."""

    def __init__(self, batch, index):
        self.batch, self.index, self.kernel = batch, index, None

    @property
    def name(self):
        return self.batch.kernels[self.index][0]

    def __call__(self, *args):
        if self.kernel is None:
            self.kernel = self.batch.launcher(self.index)
        return self.kernel(*args)


def compile_kernel(async_compile, name, parameter_types, source):
    """What the wrapper calls to define a foo kernel: compiled with the wrapper's other kernels
    (``_KernelBatch``) when the wrapper waits for them, or, with one compile thread, on its first launch."""
    batch = getattr(async_compile, "_foo_kernels", None)
    if batch is None or batch.launchers is not None:
        batch = async_compile._foo_kernels = _KernelBatch(async_compile)
    index = batch.add(name, parameter_types, source)
    if get_compile_threads() <= 1:
        return _CompiledOnFirstLaunch(batch, index)
    return LambdaFuture(lambda: batch.launcher(index))


# How CppScheduling.define_kernel (PyTorch 2.13) defines a kernel in the Python wrapper.
_CPU_KERNEL_DEFINITION = "async_compile.cpp_pybinding("
# The first line of a foo kernel's C++ source.
_FOO_KERNEL_MARK = "// foo_backend: launched on a foo stream\n"


class FooScheduling(CppScheduling):
    """Inductor's C++ kernels, defined in the wrapper as foo launches instead of CPU Python bindings."""

    def ready_to_flush(self):
        # Each kernel is launched where its node is scheduled, as on a GPU: in order with the stream switches,
        # event records and buffer frees around it (for CPU, Inductor batches kernels until a device change).
        return True

    def define_kernel(self, src_code, nodes, kernel_args=None):
        wrapper = V.graph.wrapper_code
        define = wrapper.define_kernel

        def define_foo_kernel(kernel_name, kernel_body, *args, **kwargs):
            if V.graph.cpp_wrapper:  # defined in the C++ wrapper's library, launched by FooCppWrapperCodegen
                return define(kernel_name, kernel_body, *args, **kwargs)
            if not kernel_body.startswith(_CPU_KERNEL_DEFINITION):
                raise RuntimeError(f"foo: Inductor defined kernel {kernel_name} in an unknown way: this torch "
                                   f"({torch.__version__}) is not supported by foo_backend.compiler")
            kernel_body = (f"foo_inductor.compile_kernel(async_compile, {kernel_name!r}, "
                           + kernel_body[len(_CPU_KERNEL_DEFINITION):])
            return define(kernel_name, kernel_body, *args, **kwargs)

        wrapper.define_kernel = define_foo_kernel
        try:
            # CppScheduling defines a kernel once per source text in a graph (``wrapper.src_to_kernel``): marked,
            # foo's source is never CPU's, so a CPU part and a foo part of one graph never share a definition.
            return super().define_kernel(_FOO_KERNEL_MARK + src_code, nodes, kernel_args)
        finally:
            del wrapper.define_kernel


class _FooKernelCalls:
    """Writes a foo kernel's call as a CPU kernel's: the call launches it on the current stream."""

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE_TYPE and not triton:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)


class FooWrapperCodegen(_FooKernelCalls, PythonWrapperCodegen):
    """The Python wrapper of a graph on foo: it imports foo's kernel compiler."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return _FooSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return FooWrapperCodegen()

    def write_header(self):
        super().write_header()
        self.imports.writeline("from foo_backend.compiler import inductor as foo_inductor")


class _FooSubgraphWrapperCodegen(_FooKernelCalls, SubgraphPythonWrapperCodegen):
    """A subgraph's wrapper (a ``torch.cond`` branch): its code joins its parent's, which imports foo's."""


class FooCppWrapperCodegen(CppWrapperCpu):
    """The C++ wrapper of a graph on foo (``cpp_wrapper``; AOTInductor's models). Its buffers are allocated on
    the graph's foo device through PyTorch's C shim, and operators left to ATen call foo's shim
    (``aoti_torch_foo_<op>``, the dispatcher). Its kernels are compiled into the wrapper's library, as CPU's,
    but never called by the host: each gets a packed-arguments entry point, and the wrapper launches it through
    foo's C functions (``include/foo_backend/aoti.h``) on the current foo stream, as the Python wrapper does."""

    def __init__(self):
        self.device = DEVICE_TYPE
        super().__init__()
        self.needs_vec_isa = True  # the kernels are the CPU's C++
        self._foo_kernels = set()

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        return FooCppWrapperCodegen()

    def add_device_include(self, device):
        if device != DEVICE_TYPE:
            return super().add_device_include(device)
        if device in self.included_devices:
            return
        self.included_devices.add(device)
        self.header.splice_jit("#include <torch/csrc/inductor/cpp_wrapper/common.h>")
        self.header.splice_aot("#include <torch/csrc/inductor/aoti_include/common.h>")
        # The header's version in the source, which keys Inductor's cache of compiled libraries: a library built
        # against another version of the header is never loaded.
        self.header.splice(f'#include "{_AOTI_HEADER}"  // foo_backend {config.codegen_version}')
        # What foo's model runner checks before it runs any of the model's code.
        self.header.splice_aot('extern "C" AOTI_TORCH_EXPORT int64_t foo_aoti_model_abi_version() '
                               f"{{ return {_ABI_VERSION}; }}")

    def codegen_model_constructor(self):
        # An AOTInductor model's base class parses the names of PyTorch's devices only: foo's model gives it
        # "cpu[:i]" for "foo[:i]" and then sets its device type. Its constants are declared CPU tensors, which
        # the base class loads into host memory (it would for foo too, its default for a device it does not
        # know); the run uses their copies on foo (_write_constants_unpacking).
        with self._target_buf("prefix", IndentedBuffer()):
            super().codegen_model_constructor()
            constructor = self.prefix.getvalue()
        code, replaced = _MODEL_BASE_DEVICE.subn(r"\1foo_aoti_model_base_device(device_str)", constructor, count=1)
        if not replaced:
            raise RuntimeError(f"foo: this torch ({torch.__version__}) writes AOTInductor's model constructor in a "
                               "way foo_backend.compiler does not know")
        code, constants = _CONSTANT_ON_FOO.subn(r"\1cached_torch_device_type_cpu;", code)
        if constants:
            self.used_cached_devices.add("cpu")
        body = code.index("{", code.index("AOTInductorModelBase(")) + 1
        code = code[:body] + "\n    device_type_ = aoti_torch_device_type_privateuse1();" + code[body:]
        self.prefix.writelines(code.splitlines())

    def _write_constants_unpacking(self):
        if not V.graph.aot_mode:
            return super()._write_constants_unpacking()
        for index, name in enumerate(V.graph.constants.keys()):
            self.prefix.writeline(f"[[maybe_unused]] auto {name} = foo_aoti_constant(constants_->at({index}), "
                                  "this->device_idx_);")

    def codegen_device(self, device):
        if device.type != DEVICE_TYPE:
            return super().codegen_device(device)
        self.used_cached_devices.add("privateuse1")  # foo's device type in PyTorch's C shim
        return f"cached_torch_device_type_privateuse1, {device.index or 0}"

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, arg_types=None,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type != DEVICE_TYPE or triton:
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton,
                                                        arg_types=arg_types, **kwargs)
        handle = f"{kernel_name}_foo_handle"
        if kernel_name not in self._foo_kernels:
            self._foo_kernels.add(kernel_name)
            entry = f"{kernel_name}_foo_entry"
            self.header.splice(_launch_entry_point(arg_types, kernel=kernel_name, entry=entry))
            self.header.splice(f"""
                static FooKernelHandle {handle}() {{
                    static const FooKernelHandle handle = [] {{
                        FooKernelHandle created;
                        AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_create_kernel(
                            "{kernel_name}", &{entry}, "{';'.join(arg_types)}", &created));
                        return created;
                    }}();
                    return handle;
                }}
                """)
        arguments = []
        for arg, type_ in zip(call_args, arg_types):
            if type_.endswith("*"):
                arguments.append(f"FooKernelArgument{{{arg}.get(), 0, 0.0, 0}}")
            elif type_.removeprefix("const ").strip() in ("double", "float"):
                arguments.append(f"FooKernelArgument{{nullptr, 0, static_cast<double>({arg}), 1}}")
            else:
                arguments.append(f"FooKernelArgument{{nullptr, static_cast<int64_t>({arg}), 0.0, 0}}")
        array = self._generate_temporary_array_pointer("FooKernelArgument", arguments)
        self.writeline(f"AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_launch_kernel({handle}(), {array}, {len(arguments)}));")


class FooDeviceOpOverrides(inductor_common.DeviceOpOverrides):
    """The device calls the Python wrapper writes for foo."""

    def import_get_raw_stream_as(self, name):
        return f"from foo_backend.compiler.dynamo import get_raw_stream as {name}"

    def set_device(self, device_idx):
        return f"torch.foo.set_device({device_idx})"

    def synchronize(self):
        return "torch.foo.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.foo.device({device_idx})"

    def current_stream(self):
        return "torch.foo.current_stream()"

    def cpp_aoti_device_guard(self):
        return "torch::stable::accelerator::DeviceGuard"

    def cpp_aoti_stream_guard(self):
        return "FooAotiStreamGuard"

    def cpp_kernel_type(self):
        return "void*"  # a field per kernel in an AOTInductor model, unused: foo's kernels are in the model's library


# Inductor treats a device that is neither the CPU nor a GPU it knows as a Triton GPU in three places, as less than
# the CPU in one, and knows the C++ wrapper headers of its own devices: foo's five patches of Inductor, declared in
# foo_backend._patches and applied by register().

def _patch_get_current_backend():
    """The ``"inductor_current_backend"`` patch. The code generators ask which backend generates code for the
    current device; for a device Inductor does not know, the answer is CUDA's ("triton"), and C++ code
    generation goes wrong (its variables lose their dtypes). foo's is the CPU's, config.cpu_backend. The
    function is imported by name. Returns PyTorch's function."""
    get_current_backend = inductor_utils.get_current_backend

    def foo_get_current_backend(device_type=None):
        if (device_type or V.graph.get_current_device_or_throw().type) == DEVICE_TYPE:
            return get_current_backend("cpu")
        return get_current_backend(device_type)

    for module in (inductor_utils, inductor_common, inductor_scheduler, inductor_mm_common):
        assert module.get_current_backend is get_current_backend, module.__name__
        module.get_current_backend = foo_get_current_backend
    return get_current_backend


def _patch_is_cpu():
    """The ``"inductor_is_cpu"`` patch. The scheduler skips loop reordering and reindexing, which its C++ code
    generator does not support, for nodes that "are CPU": foo's nodes run that code generator. Returns
    PyTorch's method."""
    is_cpu = inductor_scheduler.BaseSchedulerNode.is_cpu

    def foo_is_cpu(node):
        device = node.get_device()
        return is_cpu(node) or (device is not None and device.type == DEVICE_TYPE)

    inductor_scheduler.BaseSchedulerNode.is_cpu = foo_is_cpu
    return is_cpu


def _patch_lowering_is_gpu():
    """The ``"inductor_lowering_is_gpu"`` patch. A pointwise operator runs on its first input's device unless
    another input is on a GPU: with a 0-dim CPU tensor first, a CPU kernel would read foo memory. Its foo
    inputs decide, as a GPU's do (is_gpu is imported by name; the lowerings ask it nothing else). Returns
    PyTorch's function."""
    is_gpu = inductor_lowering.is_gpu
    assert inductor_lowering.is_gpu is inductor_utils.is_gpu
    inductor_lowering.is_gpu = lambda device: device == DEVICE_TYPE or is_gpu(device)
    return is_gpu


def _patch_device_need_guard():
    """The ``"inductor_device_need_guard"`` patch. Compiled code enters the graph's device
    (``torch.foo.device(i)``), as it enters CUDA's, so that buffers are allocated there: Inductor does this
    for GPUs only. Returns PyTorch's function."""
    need_guard = inductor_scheduler.device_need_guard
    inductor_scheduler.device_need_guard = lambda device: device == DEVICE_TYPE or need_guard(device)
    return need_guard


def _patch_cpp_wrapper_header():
    """The ``"inductor_cpp_wrapper_header"`` patch. Inductor precompiles the header of a C++ wrapper's device,
    ``torch/csrc/inductor/{cpp_wrapper,aoti_include}/<device>.h``, which PyTorch ships for its own devices.
    foo's wrapper is the CPU's C++ plus calls of C functions (its kernels are the CPU's), and includes foo's
    header itself: it is compiled with the CPU's. Returns PyTorch's function."""
    wrapper_header = inductor_codecache._get_cpp_wrapper_header

    def foo_wrapper_header(device, aot_mode=False):
        return wrapper_header("cpu" if device.split(":")[0] == DEVICE_TYPE else device, aot_mode)

    inductor_codecache._get_cpp_wrapper_header = foo_wrapper_header
    return wrapper_header


class MoveConstructorsToFoo(CustomGraphModulePass):
    """foo's post-grad pass (its device's custom pass): Inductor's own ``move_constructors_to_gpu``, for foo.
    Tensors a graph constructs on the CPU only for the device's use are constructed on the device, and when
    graphs are recorded in partitions, CPU scalar inputs are copied to the device (the copy is partitioned
    out, the graph reads device memory). PyTorch's pass targets the GPU type it finds available, "cuda" where
    none is."""

    def __call__(self, graph_module):
        into_graphs = bool(inductor_config.triton.cudagraphs and inductor_config.graph_partition)
        ConstructorMoverPass(DEVICE_TYPE, allow_inputs=into_graphs, allow_outputs=into_graphs)(graph_module.graph)

    def uuid(self):
        return config.codegen_version


@functools.cache
def register():
    """Registers foo's code generators with Inductor (once; the lookup of ``torch.foo.Scheduling`` calls it)."""
    inductor_common.register_device_op_overrides(DEVICE_TYPE, FooDeviceOpOverrides())
    for patch in ("inductor_current_backend", "inductor_is_cpu", "inductor_lowering_is_gpu",
                  "inductor_device_need_guard", "inductor_cpp_wrapper_header"):
        _patches.apply(patch)
    graph_trees.bind()
    inductor_common.register_backend_for_device(DEVICE_TYPE, FooScheduling, FooWrapperCodegen,
                                                FooCppWrapperCodegen, device_custom_pass=MoveConstructorsToFoo(),
                                                device_custom_config=config)
