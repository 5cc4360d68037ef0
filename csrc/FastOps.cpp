// Unboxed entry points for the hottest operators, and for the operators whose CPU counterpart is a
// different operator (convolution). They run exactly the same mechanism as the boxed fallback
// (HostKernelCall: kernel views in, CPU kernel on device memory, results mapped back) but skip boxing
// the arguments, which dominates the cost of a small op.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>

#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_backward_overrideable_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/convolution_overrideable_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>

#include "HostKernel.h"

namespace foo {
namespace {

// How each parameter type reaches the CPU kernel: tensors become kernel views, the rest passes as is.
template <class T>
struct HostArg {
  using type = T;
  static T convert(HostKernelCall&, T value) { return static_cast<T>(value); }
};

at::Tensor hostTensor(HostKernelCall& call, const at::Tensor& t, bool mutated) {
  if (!t.defined()) return t;
  if (isFoo(t)) return call.input(t);
  call.hostInput(t, /*any_shape=*/false, mutated);
  return t;
}

template <>
struct HostArg<const at::Tensor&> {
  using type = at::Tensor;
  static at::Tensor convert(HostKernelCall& call, const at::Tensor& t) { return hostTensor(call, t, false); }
};

template <>
struct HostArg<at::Tensor&> {
  using type = at::Tensor;
  static at::Tensor convert(HostKernelCall& call, at::Tensor& t) { return hostTensor(call, t, true); }
};

template <>
struct HostArg<const std::optional<at::Tensor>&> {
  using type = std::optional<at::Tensor>;
  static std::optional<at::Tensor> convert(HostKernelCall& call, const std::optional<at::Tensor>& t) {
    return t ? std::optional<at::Tensor>(hostTensor(call, *t, false)) : std::nullopt;
  }
};

// The position of the single mutable tensor parameter: what an in-place or out= kernel returns.
template <class... Args>
constexpr size_t mutableTensorIndex() {
  constexpr bool is_mutable[] = {std::is_same_v<Args, at::Tensor&>...};
  size_t count = 0;
  size_t index = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) {
    if (is_mutable[i]) {
      ++count;
      index = i;
    }
  }
  return count == 1 ? index : sizeof...(Args);
}

constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

// The CPU kernel of an operator is, by default, the operator's own CPU kernel.
template <class Op>
struct SameOpOnCpu {
  template <class... HostArgs>
  static decltype(auto) run(HostArgs&... args) {
    return Op::redispatch(kCpuKeys, args...);
  }
};

template <class Op, class CpuKernel = SameOpOnCpu<Op>, class Schema = typename Op::schema>
struct HostKernel;

template <class Op, class CpuKernel, class Result, class... Args>
struct HostKernel<Op, CpuKernel, Result(Args...)> {
  static Result call(Args... args) {
    HostKernelCall call(Op::name);
    std::tuple<typename HostArg<Args>::type...> host{HostArg<Args>::convert(call, args)...};
    std::conditional_t<std::is_reference_v<Result>, int, Result> result{};
    call.run([&] {
      std::apply(
          [&](auto&... host_args) {
            if constexpr (std::is_reference_v<Result>) {
              CpuKernel::run(host_args...);
            } else {
              result = CpuKernel::run(host_args...);
            }
          },
          host);
    });
    call.syncArguments();
    if constexpr (std::is_reference_v<Result>) {
      constexpr size_t mutated = mutableTensorIndex<Args...>();
      static_assert(mutated < sizeof...(Args), "in-place/out= kernels need exactly one mutable tensor");
      return std::get<mutated>(std::forward_as_tuple(args...));
    } else if constexpr (std::is_same_v<Result, at::Tensor>) {
      return call.output(std::move(result));
    } else {
      return std::apply([&](auto&... outputs) { return Result(call.output(std::move(outputs))...); }, result);
    }
  }
};

// PyTorch hands convolutions on PrivateUse1 to the *_overrideable operators; on foo memory they run
// CPU's own convolution (which picks oneDNN or the slow kernels exactly as it does for CPU tensors).
struct CpuConvolution {
  template <class... HostArgs>
  static at::Tensor run(HostArgs&... args) {
    return at::_ops::convolution::redispatch(kCpuKeys, args...);
  }
};

struct CpuConvolutionBackward {
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> run(
      at::Tensor& grad_output, at::Tensor& input, at::Tensor& weight, c10::SymIntArrayRef stride,
      c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
      c10::SymInt groups, std::array<bool, 3> output_mask) {
    // The bias has one entry per output channel.
    const std::array<c10::SymInt, 1> bias_sizes{transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
    return at::_ops::convolution_backward::redispatch(kCpuKeys, grad_output, input, weight, bias_sizes, stride,
                                                      padding, dilation, transposed, output_padding, groups,
                                                      output_mask);
  }
};

#define FOO_HOST_KERNEL(schema, op) m.impl(schema, TORCH_FN(HostKernel<at::_ops::op>::call))

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  FOO_HOST_KERNEL("add.Tensor", add_Tensor);
  FOO_HOST_KERNEL("add_.Tensor", add__Tensor);
  FOO_HOST_KERNEL("add.out", add_out);
  FOO_HOST_KERNEL("sub.Tensor", sub_Tensor);
  FOO_HOST_KERNEL("mul.Tensor", mul_Tensor);
  FOO_HOST_KERNEL("mul_.Tensor", mul__Tensor);
  FOO_HOST_KERNEL("div.Tensor", div_Tensor);
  FOO_HOST_KERNEL("relu", relu);
  FOO_HOST_KERNEL("sigmoid", sigmoid);
  FOO_HOST_KERNEL("tanh", tanh);
  FOO_HOST_KERNEL("mm", mm);
  FOO_HOST_KERNEL("addmm", addmm);
  FOO_HOST_KERNEL("sum.dim_IntList", sum_dim_IntList);
  FOO_HOST_KERNEL("_softmax", _softmax);
  FOO_HOST_KERNEL("_log_softmax", _log_softmax);
  FOO_HOST_KERNEL("_log_softmax_backward_data", _log_softmax_backward_data);
  FOO_HOST_KERNEL("nll_loss_forward", nll_loss_forward);
  FOO_HOST_KERNEL("nll_loss_backward", nll_loss_backward);
  FOO_HOST_KERNEL("threshold_backward", threshold_backward);
  m.impl("convolution_overrideable", TORCH_FN((HostKernel<at::_ops::convolution_overrideable, CpuConvolution>::call)));
  m.impl("convolution_backward_overrideable",
         TORCH_FN((HostKernel<at::_ops::convolution_backward_overrideable, CpuConvolutionBackward>::call)));
}

}  // namespace
}  // namespace foo
