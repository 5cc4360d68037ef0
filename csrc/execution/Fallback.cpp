// Every ATen operator without a dedicated foo kernel runs here: the boxed fallback hands the operator's
// CPU kernel the kernel views of its foo arguments (see HostKernel.h).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "device/Generator.h"
#include "execution/Fallback.h"
#include "execution/HostKernel.h"
#include "execution/MetaFunctions.h"
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
// masks, which mapArguments looks for in the call; repeat_interleave for the size of its output, which
// a call may give (output_size), as CUDA's kernel then takes it.
bool mayRunAsynchronously(const c10::OperatorHandle& op, const c10::IValue* args) {
  if (!op.hasTag(at::Tag::dynamic_output_shape) && !op.hasTag(at::Tag::data_dependent_output)) return true;
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() == "aten::index" && schema.overload_name() == "Tensor") return true;
  if (schema.name() == "aten::repeat_interleave" && schema.overload_name() == "Tensor") return !args[1].isNone();
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
  if (!mayRunAsynchronously(op, args) || cudaReadsOnTheHost(schema, args)) call.keepSynchronous();
  if (op.hasTag(at::Tag::nondeterministic_seeded)) call.drawsRandomNumbers();
  if (numbersOnlyScale(schema.name())) call.signNumbersByRange();
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
    std::optional<FirstUse> first_use;
    std::shared_ptr<LaunchPlan> plan = call.plan();
    if (!plan && dense) plan = planFromMeta(op, call, args, first_use);
    if (plan) {
      runQueued(op, call, std::move(plan), cpu_keys, stack);
      return;
    }
    call.run(cpu_kernel);
    call.syncArguments();
    std::vector<at::Tensor> results;
    std::vector<int> structure;
    if (flattenTensors(stack->data() + stack->size() - returns, returns, results, &structure)) {
      if (first_use) call.noteFirstUse(*first_use, results);
      call.learn(results, std::move(structure));
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
