// Unboxed entry points for the hottest operators, and for the operators whose CPU counterpart is a
// different operator (convolution). They run exactly the same mechanism as the boxed fallback
// (HostKernelCall: kernel views in, CPU kernel on device memory, results mapped back) but skip boxing
// the arguments, which dominates the cost of a small op.
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <array>
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

#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>

#include "execution/Fallback.h"
#include "execution/HostKernel.h"
#include "execution/QueuedLaunch.h"

namespace foo {
namespace {

// How each parameter type reaches the CPU kernel, in two steps: declare() adds the argument to the call's
// launch signature; take() returns what the kernel receives (as a value it can own: a queued kernel
// outlives the caller's arguments). A tensor becomes its kernel view, or, when the call is queued, a
// placeholder that the queued kernel fills with the view it makes on the stream's worker (slot()).
template <class T>
struct HostArg {
  using type = std::decay_t<T>;
  static void declare(HostKernelCall& call, const type& value) { call.argument(value); }
  static type take(HostKernelCall&, const type& value, bool) { return value; }
  static int slot(const HostKernelCall&, const type&) { return -1; }
};

template <HostKernelCall::TensorUse kUse>
struct TensorArg {
  using type = at::Tensor;
  static void declare(HostKernelCall& call, const at::Tensor& t) { call.declare(t, kUse); }
  static at::Tensor take(HostKernelCall& call, const at::Tensor& t, bool queued) {
    return call.kernelArgument(t, kUse, queued);
  }
  static int slot(const HostKernelCall& call, const at::Tensor& t) { return call.slotOf(t); }
};

template <>
struct HostArg<const at::Tensor&> : TensorArg<HostKernelCall::TensorUse::kInput> {};

template <>
struct HostArg<at::Tensor&> : TensorArg<HostKernelCall::TensorUse::kMutated> {};

template <>
struct HostArg<const std::optional<at::Tensor>&> {
  using type = std::optional<at::Tensor>;
  static void declare(HostKernelCall& call, const type& t) { call.declare(t); }
  static type take(HostKernelCall& call, const type& t, bool queued) {
    return t ? type(call.kernelArgument(*t, HostKernelCall::TensorUse::kInput, queued)) : std::nullopt;
  }
  static int slot(const HostKernelCall& call, const type& t) { return t ? call.slotOf(*t) : -1; }
};

template <>
struct HostArg<at::OptionalIntArrayRef> {
  using type = std::optional<std::vector<int64_t>>;
  static void declare(HostKernelCall& call, at::OptionalIntArrayRef values) { call.argument(values); }
  static type take(HostKernelCall&, at::OptionalIntArrayRef values, bool) {
    return values ? type(values->vec()) : std::nullopt;
  }
  static int slot(const HostKernelCall&, at::OptionalIntArrayRef) { return -1; }
};

template <>
struct HostArg<c10::SymIntArrayRef> {
  using type = std::vector<c10::SymInt>;
  static void declare(HostKernelCall& call, c10::SymIntArrayRef values) { call.argument(values); }
  static type take(HostKernelCall&, c10::SymIntArrayRef values, bool) { return values.vec(); }
  static int slot(const HostKernelCall&, c10::SymIntArrayRef) { return -1; }
};

// Hands an owned argument to the kernel as the parameter type it expects.
template <class T>
T& pass(T& value) {
  return value;
}

at::OptionalIntArrayRef pass(std::optional<std::vector<int64_t>>& values) {
  return values ? at::OptionalIntArrayRef(*values) : std::nullopt;
}

// Fills a queued kernel's placeholders with the kernel views it made on the stream's worker.
void attachView(at::Tensor& t, int slot, c10::ArrayRef<at::Tensor> views) {
  if (slot >= 0) t = views[slot];
}

void attachView(std::optional<at::Tensor>& t, int slot, c10::ArrayRef<at::Tensor> views) {
  if (slot >= 0) attachView(*t, slot, views);
}

template <class T>
void attachView(T&, int, c10::ArrayRef<at::Tensor>) {}

void appendResults(const at::Tensor& result, std::vector<at::Tensor>& results) { results.push_back(result); }

template <class... Tensors>
void appendResults(const std::tuple<Tensors...>& result, std::vector<at::Tensor>& results) {
  std::apply([&](const auto&... r) { (results.push_back(r), ...); }, result);
}

template <class Result, size_t... I>
Result tupleFrom(LaunchOutputs& outputs, std::index_sequence<I...>) {
  return Result(std::move(outputs[I])...);
}

// The kernel's return value, from the outputs a queued launch allocated.
template <class Result>
Result resultFrom(LaunchOutputs& outputs) {
  if constexpr (std::is_same_v<Result, at::Tensor>) {
    return std::move(outputs[0]);
  } else {
    return tupleFrom<Result>(outputs, std::make_index_sequence<std::tuple_size_v<Result>>());
  }
}

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

// A Python number in a binary arithmetic operator (x + 1.0) reaches the kernel as a 0-dim "wrapped number"
// tensor, mostly float64 or int64. CPU's TensorIterator converts it to the operation's dtype at every call
// (`.to()`: an allocation and a copy kernel, most of a small operator's time), where CUDA passes the number
// to its kernel by value. For a float32 or float64 foo tensor the operation's dtype is that tensor's (a
// number never promotes a tensor within its category), and CPU computes with the number converted to it; so
// foo converts it once, when the call is made, exactly as `.to()` would (a plain cast), and a queued kernel,
// or each replay of a graph, receives the number already converted. Half-precision operands are left alone:
// CPU's kernels read such a number at full precision.
template <class Op>
struct ConvertsWrappedNumber : std::false_type {};
template <> struct ConvertsWrappedNumber<at::_ops::add_Tensor> : std::true_type {};
template <> struct ConvertsWrappedNumber<at::_ops::add__Tensor> : std::true_type {};
template <> struct ConvertsWrappedNumber<at::_ops::sub_Tensor> : std::true_type {};
template <> struct ConvertsWrappedNumber<at::_ops::mul_Tensor> : std::true_type {};
template <> struct ConvertsWrappedNumber<at::_ops::mul__Tensor> : std::true_type {};
template <> struct ConvertsWrappedNumber<at::_ops::div_Tensor> : std::true_type {};

template <class To>
at::Tensor wrappedNumberOf(To value) {
  at::Tensor number = at::detail::scalar_tensor_static(c10::Scalar(0), c10::CppTypeToScalarType<To>::value, c10::kCPU);
  *number.mutable_data_ptr<To>() = value;
  number.unsafeGetTensorImpl()->set_wrapped_number(true);
  return number;
}

// `other` converted to `self`'s dtype when the rule above applies; else `other` itself.
at::Tensor wrappedNumberFor(const at::Tensor& self, const at::Tensor& other) {
  if (!other.defined() || !other.unsafeGetTensorImpl()->is_wrapped_number() || !isFoo(self)) return other;
  const c10::ScalarType from = other.scalar_type();
  const c10::ScalarType to = self.scalar_type();
  if (from == to || (from != c10::kDouble && from != c10::kLong) || (to != c10::kFloat && to != c10::kDouble)) return other;
  if (from == c10::kDouble) return wrappedNumberOf(static_cast<float>(*other.const_data_ptr<double>()));
  const int64_t value = *other.const_data_ptr<int64_t>();
  return to == c10::kFloat ? wrappedNumberOf(static_cast<float>(value)) : wrappedNumberOf(static_cast<double>(value));
}

// The meta function of an operator whose CPU kernel is structured: the function that computes the outputs'
// metadata, and which CPU's kernel itself calls to allocate its outputs (CUDA's structured kernels too).
// So a call whose signature (its shapes) is new is planned from it on the host, in microseconds, and queued,
// where it would otherwise wait for the stream and run to learn its outputs. Called directly, not through
// the dispatcher: PyTorch registers Python meta functions (milliseconds) over most of them there.
template <class Op>
struct StructuredMeta {
  static constexpr bool kExists = false;
};

#define FOO_STRUCTURED_META(op, meta_function)            \
  template <>                                              \
  struct StructuredMeta<at::_ops::op> {                    \
    static constexpr bool kExists = true;                  \
    template <class... MetaArgs>                           \
    static auto run(MetaArgs&... args) {                   \
      return at::meta::meta_function(args...);             \
    }                                                      \
  };

FOO_STRUCTURED_META(add_Tensor, add)
FOO_STRUCTURED_META(add__Tensor, add_)
FOO_STRUCTURED_META(add_out, add_outf)
FOO_STRUCTURED_META(sub_Tensor, sub)
FOO_STRUCTURED_META(mul_Tensor, mul)
FOO_STRUCTURED_META(mul__Tensor, mul_)
FOO_STRUCTURED_META(div_Tensor, div)
FOO_STRUCTURED_META(sigmoid, sigmoid)
FOO_STRUCTURED_META(tanh, tanh)
FOO_STRUCTURED_META(mm, mm)
FOO_STRUCTURED_META(addmm, addmm)
FOO_STRUCTURED_META(sum_dim_IntList, sum)
FOO_STRUCTURED_META(_softmax, _softmax)
FOO_STRUCTURED_META(_log_softmax, _log_softmax)
FOO_STRUCTURED_META(_log_softmax_backward_data, _log_softmax_backward_data)
FOO_STRUCTURED_META(nll_loss_forward, nll_loss_forward_symint)
FOO_STRUCTURED_META(nll_loss_backward, nll_loss_backward_symint)
FOO_STRUCTURED_META(threshold_backward, threshold_backward)
#undef FOO_STRUCTURED_META

// CPU's relu is clamp_min(self, 0), a structured operator.
template <>
struct StructuredMeta<at::_ops::relu> {
  static constexpr bool kExists = true;
  static at::Tensor run(const at::Tensor& self) { return at::meta::clamp_min(self, 0); }
};

// Convolutions have no C++ meta function: PyTorch's Meta kernels of aten::convolution and its backward, through
// the dispatcher (Python, slower), for the operators PyTorch hands PrivateUse1 with the same arguments.
constexpr c10::DispatchKeySet kMetaKeys{c10::DispatchKey::Meta};

// The bias has one entry per output channel.
std::array<c10::SymInt, 1> convolutionBiasSizes(const at::Tensor& weight, bool transposed, const c10::SymInt& groups) {
  return {transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
}

template <>
struct StructuredMeta<at::_ops::convolution_overrideable> {
  static constexpr bool kExists = true;
  template <class... MetaArgs>
  static at::Tensor run(MetaArgs&... args) {
    return at::_ops::convolution::redispatch(kMetaKeys, args...);
  }
};

template <>
struct StructuredMeta<at::_ops::convolution_backward_overrideable> {
  static constexpr bool kExists = true;
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> run(
      const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
      c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
      const c10::SymInt& groups, std::array<bool, 3> output_mask) {
    return at::_ops::convolution_backward::redispatch(kMetaKeys, grad_output, input, weight,
                                                      convolutionBiasSizes(weight, transposed, groups), stride,
                                                      padding, dilation, transposed, output_padding, groups,
                                                      output_mask);
  }
};

// What a meta function receives for an argument: a foo tensor becomes its meta tensor (HostKernelCall::metaOf);
// anything else, host scalars included, is passed as it is.
at::Tensor metaArgument(HostKernelCall& call, const at::Tensor& t) { return t.defined() && isFoo(t) ? call.metaOf(t) : t; }

std::optional<at::Tensor> metaArgument(HostKernelCall& call, const std::optional<at::Tensor>& t) {
  return t ? std::optional<at::Tensor>(metaArgument(call, *t)) : std::nullopt;
}

template <class T>
T metaArgument(HostKernelCall&, const T& value) {
  return value;
}

// The CPU kernel of an operator is, by default, the operator's own CPU kernel.
template <class Op>
struct SameOpOnCpu {
  template <class... HostArgs>
  static decltype(auto) run(HostArgs&&... args) {
    return Op::redispatch(kCpuKeys, std::forward<HostArgs>(args)...);
  }
};

template <class Op, class CpuKernel = SameOpOnCpu<Op>, class Schema = typename Op::schema>
struct UnboxedHostKernel;

template <class Op, class CpuKernel, class Result, class... Args>
struct UnboxedHostKernel<Op, CpuKernel, Result(Args...)> {
  using HostArgs = std::tuple<typename HostArg<Args>::type...>;
  static constexpr bool kReturnsArgument = std::is_reference_v<Result>;
  static constexpr char kId = 0;  // identifies the operator in launch signatures

  static void bindViews(HostArgs& host, const std::array<int, sizeof...(Args)>& slots, c10::ArrayRef<at::Tensor> views) {
    bindViews(host, slots, views, std::index_sequence_for<Args...>());
  }
  template <size_t... I>
  static void bindViews(HostArgs& host, const std::array<int, sizeof...(Args)>& slots, c10::ArrayRef<at::Tensor> views,
                        std::index_sequence<I...>) {
    (attachView(std::get<I>(host), slots[I], views), ...);
  }

  static decltype(auto) runOnCpu(HostArgs& host) {
    return std::apply([](auto&... a) -> decltype(auto) { return CpuKernel::run(pass(a)...); }, host);
  }

  // What the kernel receives (see HostArg::take), with a wrapped number converted where the rule above applies.
  static HostArgs take(HostKernelCall& call, bool queued, Args... args) {
    HostArgs host{HostArg<Args>::take(call, args, queued)...};
    if constexpr (ConvertsWrappedNumber<Op>::value) {
      std::get<1>(host) = wrappedNumberFor(std::get<0>(std::forward_as_tuple(args...)), std::get<1>(host));
    }
    return host;
  }

  static Result call(Args... args) {
    HostKernelCall call(Op::name, &kId);
    static const bool numbers_only_scale = numbersOnlyScale(Op::name);
    if (numbers_only_scale) call.signNumbersByRange();
    (HostArg<Args>::declare(call, args), ...);  // in order: the signature lists the arguments as they come
    if (call.mixesDevices()) {
      static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
      torch::jit::Stack boxed;
      torch::jit::push(boxed, args...);
      raiseChecksBeforeDevices(op, boxed.data(), boxed.size());
    }
    std::shared_ptr<LaunchPlan> plan = call.plan();
    std::optional<FirstUse> first_use;  // of a kernel that runs with these dtypes for the first time
    if constexpr (StructuredMeta<Op>::kExists) {
      if (!plan && call.mayPlanFromMeta()) {
        KernelKey key(&kId);
        (key.add(args), ...);
        plan = call.planFromMeta(
            std::move(key), [&](std::vector<at::Tensor>& outputs) { return metaOutputs(call, outputs, args...); }, {},
            first_use);
      }
    }
    if (plan) {
      HostArgs host = take(call, /*queued=*/true, args...);
      const std::array<int, sizeof...(Args)> slots{HostArg<Args>::slot(call, args)...};
      LaunchOutputs outputs = launchWithWorkerViews(
          call, std::move(plan),
          [host = std::move(host), slots](c10::ArrayRef<at::Tensor> views, std::vector<at::Tensor>& results) {
            // A copy on the worker: the closure stays as the host wrote it (a graph replays it), and the
            // views go back to the worker's pool with the copy.
            HostArgs bound = host;
            bindViews(bound, slots, views);
            if constexpr (kReturnsArgument) {
              runOnCpu(bound);
            } else {
              appendResults(runOnCpu(bound), results);
            }
          });
      if constexpr (kReturnsArgument) {
        return returnedArgument(args...);
      } else {
        return resultFrom<Result>(outputs);
      }
    }
    HostArgs host = take(call, /*queued=*/false, args...);
    std::conditional_t<kReturnsArgument, int, Result> result{};
    call.run([&] {
      if constexpr (kReturnsArgument) {
        runOnCpu(host);
      } else {
        result = runOnCpu(host);
      }
    });
    call.syncArguments();
    {
      std::vector<at::Tensor> results;
      if constexpr (!kReturnsArgument) appendResults(result, results);
      if (first_use) call.noteFirstUse(*first_use, results);
      call.learn(results, {});
    }
    if constexpr (kReturnsArgument) {
      return returnedArgument(args...);
    } else if constexpr (std::is_same_v<Result, at::Tensor>) {
      return call.output(std::move(result));
    } else {
      return std::apply([&](auto&... outputs) { return Result(call.output(std::move(outputs))...); }, result);
    }
  }

  // Appends the outputs of the operator's meta function (see StructuredMeta) for these arguments
  // (HostKernelCall::planFromMeta).
  static bool metaOutputs(HostKernelCall& call, std::vector<at::Tensor>& outputs, Args... args) {
    auto metas = std::make_tuple(metaArgument(call, args)...);
    auto result = std::apply([](auto&... m) { return StructuredMeta<Op>::run(m...); }, metas);
    if constexpr (!kReturnsArgument) appendResults(result, outputs);
    return true;
  }

  static Result returnedArgument(Args... args) {
    constexpr size_t mutated = mutableTensorIndex<Args...>();
    static_assert(mutated < sizeof...(Args), "in-place/out= kernels need exactly one mutable tensor");
    return std::get<mutated>(std::forward_as_tuple(args...));
  }
};

// PyTorch hands convolutions on PrivateUse1 to the *_overrideable operators; on foo memory they run
// CPU's own convolution (which picks oneDNN or the slow kernels exactly as it does for CPU tensors).
struct CpuConvolution {
  template <class... HostArgs>
  static at::Tensor run(HostArgs&&... args) {
    return at::_ops::convolution::redispatch(kCpuKeys, std::forward<HostArgs>(args)...);
  }
};

struct CpuConvolutionBackward {
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> run(
      at::Tensor& grad_output, at::Tensor& input, at::Tensor& weight, c10::SymIntArrayRef stride,
      c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
      c10::SymInt groups, std::array<bool, 3> output_mask) {
    return at::_ops::convolution_backward::redispatch(kCpuKeys, grad_output, input, weight,
                                                      convolutionBiasSizes(weight, transposed, groups), stride,
                                                      padding, dilation, transposed, output_padding, groups,
                                                      output_mask);
  }
};

#define FOO_HOST_KERNEL(schema, op) m.impl(schema, TORCH_FN(UnboxedHostKernel<at::_ops::op>::call))

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
  m.impl("convolution_overrideable", TORCH_FN((UnboxedHostKernel<at::_ops::convolution_overrideable, CpuConvolution>::call)));
  m.impl("convolution_backward_overrideable",
         TORCH_FN((UnboxedHostKernel<at::_ops::convolution_backward_overrideable, CpuConvolutionBackward>::call)));
}

}  // namespace
}  // namespace foo
