// Every ATen operator without a dedicated foo kernel runs here: the boxed fallback hands the operator's
// CPU kernel the kernel views of its foo arguments (see HostKernel.h).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/acos_meta_dispatch.h>
#include <ATen/ops/acosh_meta_dispatch.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/asin_meta_dispatch.h>
#include <ATen/ops/asinh_meta_dispatch.h>
#include <ATen/ops/atan_meta_dispatch.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/atanh_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/clamp_meta_dispatch.h>
#include <ATen/ops/copysign_meta_dispatch.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cosh_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/digamma_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erfc_meta_dispatch.h>
#include <ATen/ops/erfinv_meta_dispatch.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/exp2_meta_dispatch.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/fmax_meta_dispatch.h>
#include <ATen/ops/fmin_meta_dispatch.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/frac_meta_dispatch.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/gelu_meta_dispatch.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/hypot_meta_dispatch.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/lgamma_meta_dispatch.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/log10_meta_dispatch.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log2_meta_dispatch.h>
#include <ATen/ops/logaddexp_meta_dispatch.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/signbit_meta_dispatch.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sinh_meta_dispatch.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/tan_meta_dispatch.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/xlogy_meta_dispatch.h>

#include "device/Generator.h"
#include "execution/Fallback.h"
#include "execution/HostKernel.h"
#include "execution/QueuedLaunch.h"

namespace foo {
namespace {

HostKernelCall::TensorUse tensorUse(const c10::Argument& argument) {
  const bool mutated = argument.alias_info() != nullptr && argument.alias_info()->isWrite();
  return mutated ? HostKernelCall::TensorUse::kMutated : HostKernelCall::TensorUse::kInput;
}

bool isGeneratorArgument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

bool isDeviceMask(const at::Tensor& index) {
  return index.defined() && isFoo(index) && (index.scalar_type() == c10::kBool || index.scalar_type() == c10::kByte);
}

// `x[mask] = value`: index_put_ of one value through a single mask on foo fills the masked elements
// (masked_fill_, in CPU's kernel as in CUDA's) without reading the mask. CUDA takes that path only for a
// value in host memory and otherwise reads the mask; PyTorch makes a Python number given to a foo tensor
// a foo tensor, so foo takes it for a one-element value anywhere (and waits less than CUDA for a foo value).
bool fillsValueThroughMask(const c10::FunctionSchema& schema, const c10::IValue* args) {
  const std::string& name = schema.name();
  if (name != "aten::_index_put_impl_" && name != "aten::index_put_" && name != "aten::index_put") return false;
  if (args[3].toBool() || args[2].toTensor().numel() != 1) return false;  // accumulates, or not one value
  int masks = 0;
  for (const std::optional<at::Tensor> t : args[1].toOptionalTensorList()) {
    if (!t || !t->defined()) continue;
    if (!isDeviceMask(*t)) return false;
    ++masks;
  }
  return masks == 1;
}

void mapArguments(HostKernelCall& call, const c10::FunctionSchema& schema, c10::IValue* args) {
  const auto& arguments = schema.arguments();
  c10::IValue* generator = nullptr;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& arg = args[i];
    if (arg.isGenerator() || (arg.isNone() && isGeneratorArgument(arguments[i]))) {
      generator = &arg;  // mapped below, once the device is known
      call.drawsRandomNumbers();
    } else if (arg.isTensor()) {
      arg = call.argument(std::move(arg).toTensor(), tensorUse(arguments[i]));
    } else if (arg.isTensorList()) {
      const HostKernelCall::TensorUse use = tensorUse(arguments[i]);
      c10::List<at::Tensor> mapped;
      call.argument(static_cast<int64_t>(arg.toTensorList().size()));
      for (const at::Tensor& t : arg.toTensorList()) mapped.push_back(call.argument(t, use));
      arg = std::move(mapped);
    } else if (arg.isOptionalTensorList()) {
      // Tensor?[] holds indices; CUDA accepts CPU index tensors there, so do we.
      c10::List<std::optional<at::Tensor>> mapped;
      bool device_masks = false;
      for (const std::optional<at::Tensor> t : arg.toOptionalTensorList()) {
        device_masks = device_masks || (t && isDeviceMask(*t));
        mapped.push_back(call.argument(t, HostKernelCall::TensorUse::kIndices));
      }
      // The true elements of a mask on foo decide the shape it indexes: CUDA reads them (nonzero).
      if (device_masks && !fillsValueThroughMask(schema, args)) call.keepSynchronous();
      arg = std::move(mapped);
    } else if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      call.targetDevice(arg.toDevice());
      arg = c10::Device(c10::kCPU);
    } else {
      call.argument(arg);
    }
  }
  if (generator != nullptr) {
    // The CPU kernel draws from the foo generator's host generator: the numbers CPU would draw.
    const c10::DeviceIndex device = call.device() >= 0 ? call.device() : currentDevice();
    *generator = hostGeneratorFor(generator->isNone() ? std::nullopt : std::optional(generator->toGenerator()), device);
  }
}

void mapReturns(HostKernelCall& call, c10::IValue* returns, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    c10::IValue& r = returns[i];
    if (r.isTensor()) {
      r = call.output(std::move(r).toTensor());
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> mapped;
      for (const at::Tensor& t : r.toTensorList()) mapped.push_back(call.output(t));
      r = std::move(mapped);
    }
  }
}

// Operators whose returns are all views of their arguments only compute metadata.
bool isViewOperator(const c10::FunctionSchema& schema) {
  if (schema.returns().empty() || schema.is_mutable()) return false;
  for (const c10::Argument& r : schema.returns())
    if (r.alias_info() == nullptr) return false;
  return true;
}

std::mutex g_queued_despite_tags_mutex;
std::unordered_set<std::string> g_queued_despite_tags;

// Outputs that depend on values keep a call synchronous. PyTorch tags those operators;
// tools/find_value_dependent_ops.py looks for untagged ones. index.Tensor is tagged for its boolean
// masks, which mapArguments looks for in the call.
bool mayRunAsynchronously(const c10::OperatorHandle& op) {
  if (!op.hasTag(at::Tag::dynamic_output_shape) && !op.hasTag(at::Tag::data_dependent_output)) return true;
  if (op.schema().name() == "aten::index" && op.schema().overload_name() == "Tensor") return true;
  std::lock_guard<std::mutex> lock(g_queued_despite_tags_mutex);
  return g_queued_despite_tags.count(op.schema().name()) != 0;
}

// Operators whose CUDA kernels read device memory on the host before they return, so the host waits for
// the stream on foo as on CUDA: linalg's convergence and error checks (raised at the call on CUDA, so at
// the call on foo too; its other checks go through aten::_linalg_check_errors, a host read like any
// other), histc's range taken from the data when none is given, masked_fill's value given as a tensor.
bool cudaReadsOnTheHost(const c10::FunctionSchema& schema, const c10::IValue* args) {
  static const std::unordered_set<std::string> names = {
      "aten::_linalg_eigh", "aten::_linalg_svd", "aten::linalg_eig", "aten::linalg_eigvals",
      "aten::linalg_lstsq", "aten::linalg_matrix_exp", "aten::linalg_pinv"};
  const std::string& name = schema.name();
  if (names.count(name) != 0) return true;
  // histc(self, bins, min, max): equal bounds take the range from the data.
  if (name == "aten::histc") return args[2].toScalar().equal(args[3].toScalar().toDouble());
  if (name == "aten::masked_fill_" || name == "aten::masked_fill") {
    return schema.overload_name() == "Tensor" && isFoo(args[2].toTensor());
  }
  return false;
}

// The tensors among `count` values, flattened; `structure` receives each value's list length (-1 for a
// tensor). False when a value is neither a tensor nor a tensor list.
bool flattenTensors(const c10::IValue* values, size_t count, std::vector<at::Tensor>& tensors,
                    std::vector<int>* structure) {
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& v = values[i];
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
      if (structure) structure->push_back(-1);
    } else if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      for (const at::Tensor& t : list) tensors.push_back(t);
      if (structure) structure->push_back(static_cast<int>(list.size()));
    } else {
      return false;
    }
  }
  return true;
}

// The keys of the CPU kernel for a call the dispatcher sent to foo with `keys`: the same functionality
// (nested, sparse compressed, sparse COO or dense) on CPU.
c10::DispatchKeySet cpuKernelKeys(c10::DispatchKeySet keys) {
  using K = c10::DispatchKey;
  if (keys.has_any(c10::DispatchKeySet(K::NestedTensor))) return c10::DispatchKeySet(K::NestedTensorCPU);
  if (keys.has_any(c10::DispatchKeySet(K::SparseCsr))) return c10::DispatchKeySet(K::SparseCsrCPU);
  if (keys.has_any(c10::DispatchKeySet(K::Sparse))) return c10::DispatchKeySet(K::SparseCPU);
  return c10::DispatchKeySet(K::CPU);
}

// Operators of sparse tensors that only read or write the tensors' metadata, never their components'
// data: they run at once, without waiting for the stream (as views do).
bool isSparseMetadataOperator(const c10::FunctionSchema& schema) {
  static const std::unordered_set<std::string> names = {
      "aten::_sparse_coo_tensor_with_dims_and_tensors", "aten::_sparse_coo_tensor_with_dims", "aten::_nnz",
      "aten::sparse_dim", "aten::dense_dim", "aten::_dimI", "aten::_dimV", "aten::is_coalesced", "aten::_coalesced_"};
  return names.count(schema.name()) != 0;
}

void runQueued(const c10::OperatorHandle& op, HostKernelCall& call, std::shared_ptr<LaunchPlan> plan,
               c10::DispatchKeySet cpu_keys, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto args_begin = stack->end() - static_cast<std::ptrdiff_t>(schema.arguments().size());
  std::vector<c10::IValue> args(std::make_move_iterator(args_begin), std::make_move_iterator(stack->end()));
  stack->erase(args_begin, stack->end());
  const std::vector<int> structure = plan->structure;
  LaunchOutputs outputs = launchWithCallerViews(
      call, std::move(plan), [op, cpu_keys, args = std::move(args)](std::vector<at::Tensor>& results) mutable {
        torch::jit::Stack kernel_stack = args;  // a copy: a graph's replay runs the kernel again
        op.redispatchBoxed(cpu_keys, &kernel_stack);  // the boxed arguments hold the views argument() returned
        flattenTensors(kernel_stack.data(), kernel_stack.size(), results, nullptr);
      });
  size_t next = 0;
  for (int length : structure) {
    if (length < 0) {
      stack->emplace_back(std::move(outputs[next++]));
    } else {
      c10::List<at::Tensor> list;
      for (int i = 0; i < length; ++i) list.push_back(std::move(outputs[next++]));
      stack->emplace_back(std::move(list));
    }
  }
}

const char* layoutName(c10::DispatchKey cpu_key) {
  switch (cpu_key) {
    case c10::DispatchKey::SparseCPU: return "sparse COO";
    case c10::DispatchKey::SparseCsrCPU: return "sparse compressed";
    case c10::DispatchKey::NestedTensorCPU: return "nested";
    default: return "strided";
  }
}

// The first line of an error message: CPU's dispatcher errors list every backend's kernels.
std::string firstLine(const char* message) {
  const std::string text(message);
  return text.substr(0, text.find('\n'));
}

// ---- New shapes of structured operators: plans from their meta functions ------------------------------

// As FastOps.cpp's StructuredMeta for its unboxed operators: a call of a shape not seen before of one of
// these structured operators is planned from its C++ meta function (the one CPU's kernel sizes its outputs
// with), called directly since PyTorch registers Python meta functions over them in the dispatcher. The
// table holds each function type-erased beside the caller for its signature, which converts the boxed
// arguments: a template instance per signature, not per operator, so the table costs the build little.
using AnyFunction = void (*)();
template <class... Params>
using MetaFunction = at::Tensor (*)(Params...);

// A boxed argument as a meta function's parameter of type Param.
template <class Param>
struct FromBoxed;
template <>
struct FromBoxed<const at::Tensor&> {
  static at::Tensor get(const c10::IValue& value, const HostKernelCall& call) { return call.metaOf(value.toTensor()); }
};
template <>
struct FromBoxed<const at::Scalar&> {
  static at::Scalar get(const c10::IValue& value, const HostKernelCall&) { return value.toScalar(); }
};
template <>
struct FromBoxed<const std::optional<at::Scalar>&> {
  static std::optional<at::Scalar> get(const c10::IValue& value, const HostKernelCall&) {
    return value.isNone() ? std::nullopt : std::optional<at::Scalar>(value.toScalar());
  }
};
template <>
struct FromBoxed<bool> {
  static bool get(const c10::IValue& value, const HostKernelCall&) { return value.toBool(); }
};
template <>
struct FromBoxed<int64_t> {
  static int64_t get(const c10::IValue& value, const HostKernelCall&) { return value.toInt(); }
};
template <>
struct FromBoxed<std::optional<int64_t>> {
  static std::optional<int64_t> get(const c10::IValue& value, const HostKernelCall&) {
    return value.toOptional<int64_t>();
  }
};
template <>
struct FromBoxed<std::optional<at::ScalarType>> {
  static std::optional<at::ScalarType> get(const c10::IValue& value, const HostKernelCall&) {
    return value.isNone() ? std::nullopt : std::optional<at::ScalarType>(value.toScalarType());
  }
};
template <>
struct FromBoxed<c10::string_view> {
  static c10::string_view get(const c10::IValue& value, const HostKernelCall&) { return value.toStringView(); }
};
template <>
struct FromBoxed<at::IntArrayRef> {
  // The dimensions themselves: the call's temporary outlives the meta function's use of them.
  static c10::DimVector get(const c10::IValue& value, const HostKernelCall&) { return value.toDimVector(); }
};
template <>
struct FromBoxed<at::OptionalIntArrayRef> {
  struct Dims {
    std::optional<c10::DimVector> dims;
    operator at::OptionalIntArrayRef() const { return dims ? at::OptionalIntArrayRef(*dims) : std::nullopt; }
  };
  static Dims get(const c10::IValue& value, const HostKernelCall&) {
    return {value.isNone() ? std::nullopt : std::optional<c10::DimVector>(value.toDimVector())};
  }
};

template <class... Params, size_t... I>
at::Tensor callWithBoxed(AnyFunction fn, const c10::IValue* args, const HostKernelCall& call,
                         std::index_sequence<I...>) {
  return reinterpret_cast<MetaFunction<Params...>>(fn)(FromBoxed<Params>::get(args[I], call)...);
}

template <class... Params>
at::Tensor callWithBoxed(AnyFunction fn, const c10::IValue* args, const HostKernelCall& call) {
  return callWithBoxed<Params...>(fn, args, call, std::index_sequence_for<Params...>());
}

struct BoxedMeta {
  at::Tensor (*caller)(AnyFunction fn, const c10::IValue* args, const HostKernelCall& call);
  AnyFunction fn;
  size_t arguments;  // the meta function's: a schema with another count plans nothing
};

template <class... Params>
BoxedMeta boxedMeta(MetaFunction<Params...> fn) {
  return {&callWithBoxed<Params...>, reinterpret_cast<AnyFunction>(fn), sizeof...(Params)};
}

// A meta function's tensor and scalar parameter types, named short: the table spells many signatures.
using T = const at::Tensor&;
using S = const at::Scalar&;

const std::unordered_map<std::string, BoxedMeta>& boxedMetas() {
  static const auto* const table = [] {
    auto* t = new std::unordered_map<std::string, BoxedMeta>;
    const auto add = [t](const char* name, BoxedMeta meta) { t->emplace(std::string("aten::") + name, meta); };
    for (auto [name, fn] : std::initializer_list<std::pair<const char*, MetaFunction<T>>>{
             {"exp", at::meta::exp}, {"log", at::meta::log}, {"sin", at::meta::sin}, {"cos", at::meta::cos},
             {"tan", at::meta::tan}, {"sqrt", at::meta::sqrt}, {"rsqrt", at::meta::rsqrt}, {"neg", at::meta::neg},
             {"reciprocal", at::meta::reciprocal}, {"erf", at::meta::erf}, {"erfc", at::meta::erfc},
             {"erfinv", at::meta::erfinv}, {"exp2", at::meta::exp2}, {"expm1", at::meta::expm1},
             {"log1p", at::meta::log1p}, {"log2", at::meta::log2}, {"log10", at::meta::log10},
             {"floor", at::meta::floor}, {"ceil", at::meta::ceil}, {"trunc", at::meta::trunc},
             {"frac", at::meta::frac}, {"sign", at::meta::sign}, {"sgn", at::meta::sgn}, {"asin", at::meta::asin},
             {"acos", at::meta::acos}, {"atan", at::meta::atan}, {"sinh", at::meta::sinh}, {"cosh", at::meta::cosh},
             {"asinh", at::meta::asinh}, {"acosh", at::meta::acosh}, {"atanh", at::meta::atanh},
             {"silu", at::meta::silu}, {"mish", at::meta::mish}, {"hardsigmoid", at::meta::hardsigmoid},
             {"digamma", at::meta::digamma}, {"lgamma", at::meta::lgamma}, {"signbit", at::meta::signbit},
             {"bitwise_not", at::meta::bitwise_not}, {"round", at::meta::round}, {"sigmoid", at::meta::sigmoid},
             {"tanh", at::meta::tanh}}) {
      add(name, boxedMeta(fn));
    }
    for (auto [name, fn] : std::initializer_list<std::pair<const char*, MetaFunction<T, T>>>{
             {"mul.Tensor", at::meta::mul}, {"div.Tensor", at::meta::div}, {"maximum", at::meta::maximum},
             {"minimum", at::meta::minimum}, {"fmax", at::meta::fmax}, {"fmin", at::meta::fmin},
             {"atan2", at::meta::atan2}, {"pow.Tensor_Tensor", at::meta::pow}, {"eq.Tensor", at::meta::eq},
             {"ne.Tensor", at::meta::ne}, {"lt.Tensor", at::meta::lt}, {"le.Tensor", at::meta::le},
             {"gt.Tensor", at::meta::gt}, {"ge.Tensor", at::meta::ge}, {"bitwise_and.Tensor", at::meta::bitwise_and},
             {"bitwise_or.Tensor", at::meta::bitwise_or}, {"bitwise_xor.Tensor", at::meta::bitwise_xor},
             {"remainder.Tensor", at::meta::remainder}, {"fmod.Tensor", at::meta::fmod},
             {"hypot", at::meta::hypot}, {"copysign.Tensor", at::meta::copysign},
             {"logaddexp", at::meta::logaddexp}, {"xlogy.Tensor", at::meta::xlogy}, {"mm", at::meta::mm},
             {"bmm", at::meta::bmm}}) {
      add(name, boxedMeta(fn));
    }
    for (auto [name, fn] : std::initializer_list<std::pair<const char*, MetaFunction<T, T, S>>>{
             {"add.Tensor", at::meta::add}, {"sub.Tensor", at::meta::sub},
             {"threshold_backward", at::meta::threshold_backward}, {"lerp.Scalar", at::meta::lerp}}) {
      add(name, boxedMeta(fn));
    }
    for (auto [name, fn] : std::initializer_list<std::pair<const char*, MetaFunction<T, S>>>{
             {"pow.Tensor_Scalar", at::meta::pow}, {"eq.Scalar", at::meta::eq}, {"ne.Scalar", at::meta::ne},
             {"lt.Scalar", at::meta::lt}, {"le.Scalar", at::meta::le}, {"gt.Scalar", at::meta::gt},
             {"ge.Scalar", at::meta::ge}, {"leaky_relu", at::meta::leaky_relu}}) {
      add(name, boxedMeta(fn));
    }
    add("softplus", boxedMeta<T, S, S>(at::meta::softplus));
    add("elu", boxedMeta<T, S, S, S>(at::meta::elu));
    add("addcmul", boxedMeta<T, T, T, S>(at::meta::addcmul));
    add("addcdiv", boxedMeta<T, T, T, S>(at::meta::addcdiv));
    add("addmm", boxedMeta<T, T, T, S, S>(at::meta::addmm));
    add("baddbmm", boxedMeta<T, T, T, S, S>(at::meta::baddbmm));
    add("sum.dim_IntList", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>>(at::meta::sum));
    add("mean.dim", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>>(at::meta::mean));
    add("amax", boxedMeta<T, at::IntArrayRef, bool>(at::meta::amax));
    add("amin", boxedMeta<T, at::IntArrayRef, bool>(at::meta::amin));
    add("argmax", boxedMeta<T, std::optional<int64_t>, bool>(at::meta::argmax));
    add("argmin", boxedMeta<T, std::optional<int64_t>, bool>(at::meta::argmin));
    add("cumsum", boxedMeta<T, int64_t, std::optional<at::ScalarType>>(at::meta::cumsum));
    add("cumprod", boxedMeta<T, int64_t, std::optional<at::ScalarType>>(at::meta::cumprod));
    add("_softmax", boxedMeta<T, int64_t, bool>(at::meta::_softmax));
    add("_log_softmax", boxedMeta<T, int64_t, bool>(at::meta::_log_softmax));
    add("gelu", boxedMeta<T, c10::string_view>(at::meta::gelu));
    add("clamp", boxedMeta<T, const std::optional<at::Scalar>&, const std::optional<at::Scalar>&>(at::meta::clamp));
    return t;
  }();
  return *table;
}

// The plan of a boxed call from its operator's meta function (HostKernelCall::planFromMeta), or nullptr.
std::shared_ptr<LaunchPlan> planFromMeta(const c10::OperatorHandle& op, HostKernelCall& call, const c10::IValue* args,
                                         std::optional<KernelKey>& first_use) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name =
      schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
  const auto found = boxedMetas().find(name);
  if (found == boxedMetas().end() || found->second.arguments != schema.arguments().size() ||
      !call.mayPlanFromMeta()) {
    return nullptr;
  }
  KernelKey key(&schema);
  for (size_t i = 0; i < schema.arguments().size(); ++i) key.add(args[i]);
  const BoxedMeta& meta = found->second;
  return call.planFromMeta(
      std::move(key),
      [&](std::vector<at::Tensor>& outputs) {
        outputs.push_back(meta.caller(meta.fn, args, call));
        return true;
      },
      {-1}, first_use);
}

void hostKernelFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  // Operators of other libraries reach foo only through kernels registered for foo, as on a GPU: running
  // their CPU kernel here would hide a missing device kernel from the code foo is meant to test.
  TORCH_CHECK_NOT_IMPLEMENTED(schema.name().rfind("aten::", 0) == 0, "Could not run '", schema.name(),
                              "' with arguments from the 'foo' backend: the operator has no foo kernel. Register one "
                              "with torch.library.register_kernel(op, \"foo\", fn) or TORCH_LIBRARY_IMPL(ns, "
                              "PrivateUse1, m).");
  HostKernelCall call(schema.name().c_str(), &schema);
  c10::IValue* args = stack->data() + stack->size() - schema.arguments().size();
  if (!mayRunAsynchronously(op) || cudaReadsOnTheHost(schema, args)) call.keepSynchronous();
  if (op.hasTag(at::Tag::nondeterministic_seeded)) call.drawsRandomNumbers();
  mapArguments(call, schema, args);
  if (call.mixesDevices()) raiseChecksBeforeDevices(op, args, schema.arguments().size());
  const c10::DispatchKeySet cpu_keys = cpuKernelKeys(keys);
  const c10::DispatchKey cpu_key = cpu_keys.highestPriorityTypeId();
  const bool dense = cpu_key == c10::DispatchKey::CPU;
  if (cpu_key == c10::DispatchKey::SparseCPU || cpu_key == c10::DispatchKey::SparseCsrCPU) {
    call.markViewsRequiringGrad();
  }
  // CPU's dispatcher would list every backend's kernels; foo says it in one line.
  TORCH_CHECK_NOT_IMPLEMENTED(dense || op.hasComputedKernelForDispatchKey(cpu_key), "Could not run '", schema.name(),
                              "' with ", layoutName(cpu_key), " tensors on 'foo': CPU has no kernel for them either.");
  const auto cpu_kernel = [&] {
    try {
      op.redispatchBoxed(cpu_keys, stack);
    } catch (const c10::NotImplementedError& e) {
      TORCH_CHECK_NOT_IMPLEMENTED(!dense || op.hasKernelForDispatchKey(c10::DispatchKey::CPU),
                                  "Could not run '", schema.name(), "' with arguments from the 'foo' backend: ",
                                  "the operator has no CPU kernel for foo to run on device memory.");
      // An operator that CPU's sparse or nested kernel calls has no kernel for the layout, on CPU either.
      TORCH_CHECK_NOT_IMPLEMENTED(dense, schema.name(), " with ", layoutName(cpu_key), " tensors on 'foo': ",
                                  firstLine(e.what_without_backtrace()));
      throw;
    }
  };
  const size_t returns = schema.returns().size();
  if (isViewOperator(schema) || (!dense && isSparseMetadataOperator(schema))) {
    call.runMetadataOnly(cpu_kernel);
    call.syncArguments();
  } else {
    std::optional<KernelKey> first_use;
    std::shared_ptr<LaunchPlan> plan = call.plan();
    if (!plan && dense) plan = planFromMeta(op, call, args, first_use);
    if (plan) {
      runQueued(op, call, std::move(plan), cpu_keys, stack);
      return;
    }
    call.run(cpu_kernel);
    if (first_use) noteKernelRan(*first_use);
    const bool arguments_changed = call.syncArguments();
    std::vector<at::Tensor> results;
    std::vector<int> structure;
    if (flattenTensors(stack->data() + stack->size() - returns, returns, results, &structure)) {
      call.learn(results, std::move(structure), arguments_changed);
    }
  }
  mapReturns(call, stack->data() + stack->size() - returns, returns);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
}

// Nested tensors on foo (nn.TransformerEncoder's fast path makes them) run CPU's nested kernels.
TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
}

// Sparse tensors on foo run CPU's sparse kernels on sparse kernel views (see HostKernel.h).
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
}

// Composite-only operators whose composite cannot run on foo tensors: it checks for CPU or CUDA tensors
// (mode), or calls a CPU-only DispatchStub (kaiser_window). Through the fallback they run the
// composite on kernel views, as CPU runs it.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"addr_", "mode.values", "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
  }
}

bool hasCompositeKernel(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

}  // namespace

namespace {
// A tensor of the call as a meta tensor of the same layout, or nothing for a layout without one (sparse,
// nested); a wrapped Python number stays as it is, since type promotion treats it apart.
std::optional<at::Tensor> onMeta(const at::Tensor& t) {
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  if (t.layout() != c10::kStrided || t.is_nested()) return std::nullopt;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

// TensorIterator's errors for an output that cannot hold the result's dtype and for shapes that do not
// broadcast (a Python meta function's come as "RuntimeError: ...").
bool isTensorIteratorError(const char* message) {
  std::string_view text(message);
  if (text.rfind("RuntimeError: ", 0) == 0) text.remove_prefix(14);
  return text.rfind("result type ", 0) == 0 || text.rfind("The size of tensor a ", 0) == 0;
}
}  // namespace

void raiseChecksBeforeDevices(const c10::OperatorHandle& op, const c10::IValue* args, size_t count) {
  torch::jit::Stack meta;
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& arg = args[i];
    if (arg.isTensor()) {
      std::optional<at::Tensor> t = onMeta(arg.toTensor());
      if (!t) return;
      meta.emplace_back(std::move(*t));
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& element : arg.toTensorList()) {
        std::optional<at::Tensor> t = onMeta(element);
        if (!t) return;
        list.push_back(std::move(*t));
      }
      meta.emplace_back(std::move(list));
    } else if (arg.isOptionalTensorList()) {
      return;  // indices: their values decide what the operator checks
    } else {
      meta.push_back(arg);
    }
  }
  try {
    op.callBoxed(&meta);
  } catch (const c10::Error& e) {
    // TensorIterator's own errors only: an operator whose CUDA kernel compares devices before anything else
    // (mm) fails other checks on meta first.
    if (isTensorIteratorError(e.what_without_backtrace())) throw;
  } catch (const std::exception& e) {  // a Python meta function's error
    if (isTensorIteratorError(e.what())) throw;
  }
}

void queueDespiteTags(const std::string& op_name, bool queue) {
  std::lock_guard<std::mutex> lock(g_queued_despite_tags_mutex);
  if (queue) {
    g_queued_despite_tags.insert(op_name);
  } else {
    g_queued_despite_tags.erase(op_name);
  }
}

void routeCompositeOperatorsToCpuKernels() {
  using K = c10::DispatchKey;
  // Per layout, CPU's key and foo's. Deliberately never destroyed: the registrations live as long as the process.
  struct Route {
    K cpu_key, foo_key;
    torch::Library* library;
  };
  static const Route routes[] = {
      {K::CPU, K::PrivateUse1, new torch::Library(torch::Library::IMPL, "aten", K::PrivateUse1, __FILE__, __LINE__)},
      {K::SparseCPU, K::SparsePrivateUse1,
       new torch::Library(torch::Library::IMPL, "aten", K::SparsePrivateUse1, __FILE__, __LINE__)},
      {K::SparseCsrCPU, K::SparseCsrPrivateUse1,
       new torch::Library(torch::Library::IMPL, "aten", K::SparseCsrPrivateUse1, __FILE__, __LINE__)}};
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !hasCompositeKernel(*op)) continue;
    const std::string unqualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    for (const Route& route : routes) {
      if (!op->hasKernelForDispatchKey(route.cpu_key) || op->hasKernelForDispatchKey(route.foo_key)) continue;
      route.library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
    }
  }
}

}  // namespace foo
