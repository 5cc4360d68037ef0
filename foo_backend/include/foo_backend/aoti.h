// What C++ code generated for foo calls: Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper) and
// AOTInductor's compiled models. It sees foo only through these C functions (exported by foo_backend's
// library, which must be loaded in the process) and PyTorch's stable C shim, never through foo's headers.
//
// - A kernel Inductor generates for foo is a host function over device memory; the generated code never
//   calls it. It creates a handle once (name, packed-arguments entry point, parameter types), then launches
//   it on the current foo stream with tensors for pointer parameters: foo translates their device addresses
//   for the kernel and returns at once, as a GPU launch does.
// - Operators left to ATen call foo's shim, `aoti_torch_foo_<op>` (generated: aoti_shim.h), which runs them
//   through the dispatcher on foo.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>  // the device guard the generated code enters (foo is the accelerator)

#include "aoti_shim.h"  // beside this file: generated code includes this one by its path

#include <cstdint>

// The version of these C functions and of what generated code does with them: an AOTInductor model exports the
// version it was compiled with (foo_aoti_model_abi_version), and foo refuses to load another.
#define FOO_AOTI_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

struct FooKernelOpaque;
using FooKernelHandle = FooKernelOpaque*;

// A kernel's entry point: its arguments packed in one array of 64-bit slots (a pointer's device address, or a
// scalar's value), as CUDA's kernelParams.
typedef void (*FooKernelEntry)(const uint64_t* arguments);

// A handle (kept for the process) for the kernel `name`; `parameter_types` are its C parameter types separated
// by ';', as Inductor declares them ("const float*;float*;const int64_t").
AOTI_TORCH_EXPORT AOTITorchError foo_aoti_create_kernel(const char* name, FooKernelEntry entry,
                                                        const char* parameter_types, FooKernelHandle* ret_kernel);

// One argument of a launch: a tensor for a pointer parameter, else a number.
struct FooKernelArgument {
  AtenTensorHandle tensor;
  int64_t integer;
  double floating;
  int32_t is_floating;
};

// Queues the kernel on the current stream of its tensors' device (all on one foo device), after the work
// queued there, and returns.
AOTI_TORCH_EXPORT AOTITorchError foo_aoti_launch_kernel(FooKernelHandle kernel, const FooKernelArgument* arguments,
                                                        int64_t count);

// A constant of an AOTInductor model, on foo device `device_index`: the constant itself if it is there (weights the
// caller gave), else its copy there, made once. The AOTI runtime loads the constants packaged in a model's library
// into host memory for any device but CUDA, XPU and MPS: a foo model declares them CPU tensors and runs on these.
AOTI_TORCH_EXPORT AOTITorchError foo_aoti_device_constant(AtenTensorHandle constant, int32_t device_index,
                                                          AtenTensorHandle* ret_constant);

struct FooStreamGuardOpaque;
using FooStreamGuardHandle = FooStreamGuardOpaque*;

// Enters foo device `device_index` (-1: the current one) and makes `stream` its current stream (a foo stream's
// id, torch.foo.Stream.stream_id; null: the stream current there), until the guard is deleted. An AOTInductor
// model runs inside one, on the stream its caller gives.
AOTI_TORCH_EXPORT AOTITorchError foo_aoti_create_stream_guard(void* stream, int32_t device_index,
                                                              FooStreamGuardHandle* ret_guard);
AOTI_TORCH_EXPORT AOTITorchError foo_aoti_delete_stream_guard(FooStreamGuardHandle guard);

#ifdef __cplusplus
}  // extern "C"

#include <torch/csrc/inductor/aoti_runtime/utils.h>

#include <memory>
#include <stdexcept>
#include <string>

// PyTorch's AOTI_TORCH_ERROR_CODE_CHECK says only which call failed. In the code generated for foo, which includes
// this header after PyTorch's, a failed call raises the error the call stored: what the operator raises eagerly.
#undef AOTI_TORCH_ERROR_CODE_CHECK
#define AOTI_TORCH_ERROR_CODE_CHECK(call)                                       \
  if ((call) != AOTI_TORCH_SUCCESS) {                                           \
    throw std::runtime_error(torch_exception_get_what_without_backtrace()); \
  }

// What generated code holds for a constant during a run (`auto w = foo_aoti_constant(constants_->at(0), ...)`).
inline torch::aot_inductor::RAIIAtenTensorHandle foo_aoti_constant(AtenTensorHandle constant, int32_t device_index) {
  AtenTensorHandle on_device = nullptr;
  AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_device_constant(constant, device_index, &on_device));
  return torch::aot_inductor::RAIIAtenTensorHandle(on_device);
}

// The device name an AOTInductor model gives its base class, which parses the names of PyTorch's devices only:
// "cpu[:i]" for "foo[:i]" (the model then sets its device type to foo's).
inline std::string foo_aoti_model_base_device(const std::string& device) {
  return device.rfind("foo", 0) == 0 ? "cpu" + device.substr(3) : device;
}

// The stream guard generated code declares (`FooAotiStreamGuard stream_guard(stream, this->device_idx_);`).
class FooAotiStreamGuard {
 public:
  FooAotiStreamGuard(void* stream, int32_t device_index) : guard_(nullptr, &deleteGuard) {
    FooStreamGuardHandle created = nullptr;
    AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_create_stream_guard(stream, device_index, &created));
    guard_.reset(created);
  }

 private:
  static void deleteGuard(FooStreamGuardHandle guard) {
    AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_delete_stream_guard(guard));
  }
  std::unique_ptr<FooStreamGuardOpaque, void (*)(FooStreamGuardHandle)> guard_;
};
#endif
