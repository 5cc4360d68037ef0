"""torch.compile on foo with Inductor's C++ wrapper (``torch._inductor.config.cpp_wrapper``).

The wrapper is C++ compiled with its graph's kernels into one library; it launches each kernel through foo's C
functions (foo_backend/include/foo_backend/aoti.h) on the current foo stream and calls the operators left to
ATen through foo's C shim. What the Python wrapper promises, the C++ one does: the tests of test_inductor.py
that say it run here again, compiled with the C++ wrapper (this module's fixture), beside the C++ wrapper's own.
The oracle is the same function eagerly on CPU (random numbers: CPU's compiled ones).
"""
import copy

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

from test_inductor import (  # noqa: F401  (the Python wrapper's tests, collected here again)
    check_compiled,
    test_compiled_cnn_inference_with_inductors_layout_optimization,
    test_compiled_cnn_training_step_channels_last,
    test_compiled_kernel_waits_for_work_queued_on_the_stream,
    test_compiled_kernels_run_on_the_current_stream,
    test_control_flow_cond,
    test_cpu_scalar_is_passed_by_value,
    test_dtypes_and_integer_arithmetic,
    test_dynamic_shapes_reuse_one_graph,
    test_extern_matmul_on_the_same_stream,
    test_graph_on_foo1_allocates_there,
    test_graph_with_cpu_and_foo_parts,
    test_kernel_errors_are_raised_at_the_next_synchronization,
    test_mixed_devices_name_foo,
    test_mutated_inputs_and_view_outputs,
    test_pointwise_and_reduction_fusions,
    test_random_ops_equal_cpu_compiled_for_the_same_seed,
    test_training_step_with_optimizer_inside_compiled_function,
)


@pytest.fixture(autouse=True)
def cpp_wrapper():
    """Each test compiles from scratch with the C++ wrapper, in this process."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with inductor_config.patch(cpp_wrapper=True, compile_threads=1):
        yield
    torch._dynamo.reset()


def test_the_wrapper_launches_foo_kernels_and_calls_foos_shim():
    def fn(a, b):
        return torch.relu(a * b + 1) @ b.t()

    a, b = torch.randn(8, 16), torch.randn(8, 16)
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(fn), a.foo(), b.foo())
    assert "foo_aoti_launch_kernel(" in code and "cpp_fused_" in code
    assert "aoti_torch_foo_mm_out(" in code  # the extern matmul: foo's shim, the dispatcher
    assert "data_ptr()" not in code  # the host never takes a device address to call a kernel itself
    assert "cached_torch_device_type_privateuse1" in code  # buffers are allocated on foo
    torch.testing.assert_close(result.cpu(), fn(a, b))


def test_operators_left_to_aten():
    # foo's shim (sort, topk), the dispatcher without a shim function (kthvalue), an index.
    check_compiled(lambda a, i: (torch.sort(a, -1), torch.topk(a, 3), torch.kthvalue(a, 3, -1), a[i] * 2),
                   torch.randn(16, 33), torch.tensor([3, 1, 5]))


def test_a_method_only_operator_left_to_aten():
    # Complex addition views its operands as real numbers: Tensor.view(dtype), a method with no at:: function,
    # which foo's shim calls through its dispatcher entry.
    a, b = torch.randn(8, 6, dtype=torch.complex64), torch.randn(8, 6, dtype=torch.complex64)
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(lambda x, y: x + y * 2), a.foo(), b.foo())
    assert "aoti_torch_foo_view_dtype(" in code
    torch.testing.assert_close(result.cpu(), a + b * 2)


def test_an_operator_error_in_a_graphs_first_call_keeps_its_message():
    # AOTAutograd runs a graph's first call under a Python dispatch mode; the shim's operator runs below it, so
    # the error is the operator's own (a mode's Python error would reach the shim without its message).
    a, b = torch.randn(2, 3).foo(), torch.arange(9).view(3, 3).foo()
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        torch.compile(torch.mm)(a, b)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        torch.mm(a, b)


def test_value_dependent_shapes_and_scalars():
    x = torch.randn(16, 5)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        check_compiled(lambda a: torch.nonzero(a > 0) * 2, x)
        check_compiled(lambda a: a * a.sum().item(), x)


def test_a_symbolic_size_reaches_the_kernels():
    fn = torch.compile(lambda a: (a.sin() * 2).mean(0) + a.shape[0], dynamic=True)
    for rows in (8, 13):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(fn(x.foo()).cpu(), (x.sin() * 2).mean(0) + rows)


def test_transformer_block_forward_and_backward():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    layer_foo = copy.deepcopy(layer).foo()
    src = torch.randn(2, 5, 16)
    out = torch.compile(layer_foo)(src.foo())
    out.square().sum().backward()
    expected = layer(src)
    expected.square().sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    for p, p_foo in zip(layer.parameters(), layer_foo.parameters()):
        torch.testing.assert_close(p_foo.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4)
