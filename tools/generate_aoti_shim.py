"""Generates foo's AOTInductor C shim: ``aoti_torch_foo_<op>`` for every operator Inductor's C++ wrapper calls
through a device's shim (torchgen's ``inductor_fallback_ops``: extern kernels such as ``mm_out`` and the ATen
fallbacks), each calling the operator through the dispatcher, which runs foo's kernel on the current stream.

CUDA's and CPU's shims call their backend's kernels directly (``at::cuda::``, ``at::cpu::``); foo's kernels are
registered on the dispatcher, so foo's shim is torchgen's device-generic one (the form of PyTorch's own
``c_shim_aten``, with ``at::`` calls) over the full fallback list, named for foo. Run by setup.py against the
installed torch, so the shim has exactly the functions and signatures that torch's Inductor generates calls to.

    python tools/generate_aoti_shim.py HEADER SOURCE
"""
import os
import sys
from unittest import mock

import torchgen
import torchgen.gen_aoti_c_shim
from torchgen.aoti.fallback_ops import inductor_fallback_ops
from torchgen.gen import get_grouped_native_functions, parse_native_yaml
from torchgen.gen_aoti_c_shim import gen_aoti_c_shim, get_fallback_op_name
from torchgen.model import NativeFunctionsGroup, Variant

# The device name torchgen gives its generic shim, and foo's.
GENERIC, FOO = "aoti_torch_aten_", "aoti_torch_foo_"
# Each shim function's body, in which it calls the operator.
CALL_BLOCK = "AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({"
SOURCE_PREAMBLE = """#define AT_PER_OPERATOR_HEADERS
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace {
// A shim function runs the operator's foo kernel below Python's dispatch modes, as CUDA's and CPU's shims, which
// call their kernels directly, do. A mode's Python error would reach the shim without its message (AOTAutograd
// runs a compiled graph's first call under a mode of its own).
struct BelowPythonDispatch {
  c10::impl::ExcludeDispatchKeyGuard guard{
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot})};
};
}  // namespace
"""
_function_call = torchgen.gen_aoti_c_shim.gen_static_dispatch_backend_call


def backend_call(function, backend_index=None):
    """What a shim function calls: torchgen's ``at::`` function, or for a method-only operator (``Tensor.set_``,
    ``Tensor.view(dtype)``: seven of 2.13's list, which have no ``at::`` function) the operator's dispatcher entry
    ``at::_ops::<op>::call``, whose arguments are the schema's, in the order torchgen's shim passes them (none of
    these operators is an out= one, whose shim puts the outputs first)."""
    if Variant.function in function.variants:
        return _function_call(function, backend_index)
    assert not function.func.is_out_fn(), f"a method-only out= operator: {function.func.name}"
    return f"at::_ops::{function.func.name.unambiguous_name()}::call"


def generate():
    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(os.path.join(packaged, "native_functions.yaml"), os.path.join(packaged, "tags.yaml"))
    fallbacks = {}
    for function in parsed.native_functions:
        name = get_fallback_op_name(function)
        if name in inductor_fallback_ops:
            fallbacks[name] = function
    functions = tuple(function for _, function in sorted(fallbacks.items()))
    # Structured operators' out= variants are called through their group (as gen_aoti_c_shim_files does).
    groups = {}
    for group in get_grouped_native_functions(parsed.native_functions):
        if isinstance(group, NativeFunctionsGroup) and group.structured:
            for function in group.functions():
                if function.structured_delegate is not None:
                    groups[function.structured_delegate] = group
                    break

    def shim(header, includes=""):
        with mock.patch.object(torchgen.gen_aoti_c_shim, "gen_static_dispatch_backend_call", backend_call):
            text = gen_aoti_c_shim(functions, inductor_fallback_ops, groups, None, parsed.backend_indices,
                                   header=header, extend_aoti_c_shim=False, includes=includes)
        assert GENERIC in text, "torchgen's generic shim changed its function names"
        return text.replace(GENERIC, FOO)

    # One header per operator (the whole of ATen/Functions.h would double the build time of this file).
    includes = "".join(sorted({f"#include <ATen/ops/{function.root_name}.h>\n" for function in functions}))
    source = shim(False, includes).replace("<torch/csrc/inductor/aoti_torch/generated/c_shim_aten.h>",
                                           "<foo_backend/aoti_shim.h>")
    assert source.count(CALL_BLOCK) >= len(functions), "torchgen's shim changed the form of its functions"
    source = source.replace(CALL_BLOCK, CALL_BLOCK + "\n        const BelowPythonDispatch below_python_dispatch;")
    return shim(True), SOURCE_PREAMBLE + source, len(functions)


def write_if_changed(path, text):
    """Leaves an unchanged file untouched, so that a rebuild does not recompile it."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    header_path, source_path = sys.argv[1:]
    header, source, count = generate()
    write_if_changed(header_path, header)
    write_if_changed(source_path, source)
    print(f"foo's AOTInductor shim: {count} operators")
