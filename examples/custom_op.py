"""Add your own operator for the foo device, in Python and in C++ (see docs/custom_ops.md).

An operator is routed by the device of its tensors, as on a GPU: foo tensors reach the kernel registered
for "foo" (dispatch key PrivateUse1), CPU tensors the CPU kernel. An operator without a foo kernel raises
NotImplementedError on foo tensors; foo's CPU fallback covers aten:: operators only.

Run:  python examples/custom_op.py            (the C++ part compiles an extension once, about 15 s)
      python examples/custom_op.py --no-cpp   (Python part only)
"""
import os
import sys
import tempfile

import numpy as np
import torch
from torch import Tensor

import foo_backend  # noqa: F401  (registers the "foo" device; plain `import torch` does too, via autoload)


# ---- Python: torch.library.custom_op ------------------------------------------------------------------
@torch.library.custom_op("myops::swish", mutates_args=(), device_types="cpu")
def swish(x: Tensor, beta: float) -> Tensor:
    """x * sigmoid(beta * x). This is the CPU kernel: host memory, so numpy may read it."""
    xn = x.detach().numpy()
    return torch.from_numpy(xn / (1 + np.exp(-beta * xn)))


@swish.register_kernel("foo")
def _(x, beta):
    # The foo kernel receives foo tensors. Their memory is device memory (Python and numpy cannot read it),
    # so it computes with torch operators, which run on the device.
    return x * torch.sigmoid(beta * x)


@swish.register_fake  # shapes and dtypes only: used by torch.compile and opcheck
def _(x, beta):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    x, beta = inputs
    ctx.save_for_backward(x)
    ctx.beta = beta


def _backward(ctx, grad):  # d/dx x*s(bx) = s + b*x*s*(1-s); no gradient for beta
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(ctx.beta * x)
    return grad * (s + ctx.beta * x * s * (1 - s)), None


swish.register_autograd(_backward, setup_context=_setup_context)


def python_op():
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    xf = x.detach().to("foo").requires_grad_()
    out_cpu, out_foo = swish(x, 1.5), swish(xf, 1.5)
    out_cpu.sum().backward()
    out_foo.sum().backward()
    print("myops::swish on", out_foo.device, "->", out_foo[0, :4].tolist())
    torch.testing.assert_close(out_foo.cpu(), out_cpu)
    torch.testing.assert_close(xf.grad.cpu(), x.grad)

    # opcheck: schema, fake impl, autograd and dispatch on foo. test_autograd_registration is skipped
    # for requires_grad inputs because PyTorch's check knows only CPU/CUDA/XPU.
    torch.library.opcheck(swish, (torch.randn(3, 5, device="foo"), 2.0))
    torch.library.opcheck(swish, (torch.randn(3, 5, device="foo", requires_grad=True), 2.0),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    compiled = torch.compile(lambda t: swish(t, 1.5).sum(-1), backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(xf.detach()).cpu(), out_cpu.sum(-1).detach())
    print("opcheck and torch.compile(backend='aot_eager', fullgraph=True): ok")


# ---- C++: TORCH_LIBRARY + TORCH_LIBRARY_IMPL(..., PrivateUse1, ...) --------------------------------------
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

// out = x + alpha * y (same shape, float32)
at::Tensor scale_add_cpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  TORCH_CHECK(x.sizes() == y.sizes() && x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat,
              "myops_cpp::scale_add: x and y must be float32 tensors of one shape");
  at::Tensor xc = x.contiguous(), yc = y.contiguous(), out = at::empty_like(xc);
  const float *xp = xc.const_data_ptr<float>(), *yp = yc.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) op[i] = xp[i] + float(alpha) * yp[i];  // host memory: a raw loop
  return out;
}

// On foo, x.data_ptr() is a device address: dereferencing it from host code faults, as with a GPU
// pointer. A kernel written outside foo_backend composes ATen operators instead; each runs on the device.
// (foo_backend's own kernels, csrc/CustomOps.cpp, run raw loops on device memory through its internal
// HostKernelCall, which hands them kernel views of the tensors on the current stream.)
at::Tensor scale_add_foo(const at::Tensor& x, const at::Tensor& y, double alpha) {
  TORCH_CHECK(x.sizes() == y.sizes(), "myops_cpp::scale_add: x and y must have one shape");
  return at::add(x, y, alpha);
}

TORCH_LIBRARY(myops_cpp, m) { m.def("scale_add(Tensor x, Tensor y, float alpha) -> Tensor"); }
TORCH_LIBRARY_IMPL(myops_cpp, CPU, m) { m.impl("scale_add", scale_add_cpu); }
TORCH_LIBRARY_IMPL(myops_cpp, PrivateUse1, m) { m.impl("scale_add", scale_add_foo); }
"""


def cpp_op():
    from torch.utils.cpp_extension import load

    # Reused by later runs with this torch; one per release, which lock their build directories differently.
    build_dir = os.path.join(tempfile.gettempdir(), f"foo_custom_op_example-torch{torch.__version__}")
    os.makedirs(build_dir, exist_ok=True)
    # A source file and load() rather than load_inline(), which would add <torch/extension.h> (twice the
    # compile time for a file that needs two ATen operators and the library macros).
    source = os.path.join(build_dir, "myops_cpp.cpp")
    if not os.path.exists(source) or open(source).read() != CPP_SOURCE:  # unchanged: the build is reused
        with open(source, "w") as f:
            f.write(CPP_SOURCE)
    load("myops_cpp_ext", [source], is_python_module=False, build_directory=build_dir)

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    out_cpu = torch.ops.myops_cpp.scale_add(x, y, 0.5)
    out_foo = torch.ops.myops_cpp.scale_add(x.to("foo"), y.to("foo"), 0.5)
    print("myops_cpp::scale_add on", out_foo.device, "->", out_foo[0].tolist())
    torch.testing.assert_close(out_foo.cpu(), out_cpu)


if __name__ == "__main__":
    python_op()
    if "--no-cpp" not in sys.argv[1:]:
        cpp_op()
    print("foo results equal CPU results")
