// Every ATen operator without a dedicated foo kernel runs here: the boxed fallback hands the operator's
// CPU kernel the kernel views of its foo arguments (see HostKernel.h).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "Generator.h"
#include "HostKernel.h"

namespace foo {
namespace {

bool isMutable(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

at::Tensor mapTensor(HostKernelCall& call, at::Tensor t, bool mutated, bool any_shape) {
  if (!t.defined()) return t;
  if (isFoo(t)) return call.input(std::move(t));
  call.hostInput(t, any_shape, mutated);
  return t;
}

bool isGeneratorArgument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

void mapArguments(HostKernelCall& call, const c10::FunctionSchema& schema, c10::IValue* args) {
  const auto& arguments = schema.arguments();
  c10::IValue* generator = nullptr;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& arg = args[i];
    if (arg.isGenerator() || (arg.isNone() && isGeneratorArgument(arguments[i]))) {
      generator = &arg;  // mapped below, once the device is known
    } else if (arg.isTensor()) {
      arg = mapTensor(call, std::move(arg).toTensor(), isMutable(arguments[i]), false);
    } else if (arg.isTensorList()) {
      const bool mutated = isMutable(arguments[i]);
      c10::List<at::Tensor> mapped;
      for (const at::Tensor& t : arg.toTensorList()) mapped.push_back(mapTensor(call, t, mutated, false));
      arg = std::move(mapped);
    } else if (arg.isOptionalTensorList()) {
      // Tensor?[] holds indices; CUDA accepts CPU index tensors there, so do we.
      c10::List<std::optional<at::Tensor>> mapped;
      for (const std::optional<at::Tensor> t : arg.toOptionalTensorList())
        mapped.push_back(t ? std::optional<at::Tensor>(mapTensor(call, *t, false, true)) : std::nullopt);
      arg = std::move(mapped);
    } else if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      call.targetDevice(arg.toDevice());
      arg = c10::Device(c10::kCPU);
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

void hostKernelFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  // Operators of other libraries reach foo only through kernels registered for foo, as on a GPU: running
  // their CPU kernel here would hide a missing device kernel from the code foo is meant to test.
  TORCH_CHECK_NOT_IMPLEMENTED(schema.name().rfind("aten::", 0) == 0, "Could not run '", schema.name(),
                              "' with arguments from the 'foo' backend: the operator has no foo kernel. Register one "
                              "with torch.library.register_kernel(op, \"foo\", fn) or TORCH_LIBRARY_IMPL(ns, "
                              "PrivateUse1, m).");
  HostKernelCall call(schema.name().c_str());
  mapArguments(call, schema, stack->data() + stack->size() - schema.arguments().size());
  call.run([&] {
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } catch (const c10::NotImplementedError&) {
      TORCH_CHECK_NOT_IMPLEMENTED(op.hasKernelForDispatchKey(c10::DispatchKey::CPU),
                                  "Could not run '", schema.name(), "' with arguments from the 'foo' backend: ",
                                  "the operator has no CPU kernel for foo to run on device memory.");
      throw;
    }
  });
  call.syncArguments();
  mapReturns(call, stack->data() + stack->size() - schema.returns().size(), schema.returns().size());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
}

// These operators have generic composite kernels that PrivateUse1 would get ahead of the fallback;
// CPU's dedicated kernels are more precise (reduced-precision dtypes), the composite only accepts CPU
// and CUDA tensors, or it calls an out= kernel that resizes and warns (the reduced losses). Routing
// them to the fallback runs CPU's kernels, so results equal CPU's.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"native_layer_norm", "native_group_norm", "addr", "addr_", "addr.out", "mode.values",
                         "narrow_copy", "_stack", "_stack.out", "all.dims_out", "any.dims_out", "linalg__powsum", "mse_loss", "smooth_l1_loss"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&hostKernelFallback>());
  }
}

}  // namespace
}  // namespace foo
