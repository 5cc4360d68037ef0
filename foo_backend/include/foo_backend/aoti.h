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
