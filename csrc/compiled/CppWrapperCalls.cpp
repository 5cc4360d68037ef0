// foo's C functions for generated C++ code (foo_backend/aoti.h): a handle per Inductor kernel and its launch,
// through the same CompiledKernel the Python wrapper calls.
#include <foo_backend/aoti.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <string>
#include <vector>

#include "compiled/CompiledKernel.h"
#include "device/Common.h"

namespace {

foo::CompiledKernel* kernelOf(FooKernelHandle handle) {
  return reinterpret_cast<foo::CompiledKernel*>(handle);
}

struct StreamGuard {
  c10::DeviceGuard device;
  c10::OptionalStreamGuard stream;
};

}  // namespace

AOTITorchError foo_aoti_create_kernel(const char* name, FooKernelEntry entry, const char* parameter_types,
                                      FooKernelHandle* ret_kernel) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    std::vector<std::string> types;
    const std::string joined = parameter_types;
    if (!joined.empty()) {
      size_t start = 0;
      for (size_t end = joined.find(';'); ; end = joined.find(';', start)) {
        types.push_back(joined.substr(start, end - start));
        if (end == std::string::npos) break;
        start = end + 1;
      }
    }
    // Kept for the process, as a loaded kernel stays loaded: the generated code holds it in a static.
    *ret_kernel = reinterpret_cast<FooKernelHandle>(
        new foo::CompiledKernel(name, reinterpret_cast<uintptr_t>(entry), types));
  });
}

AOTITorchError foo_aoti_launch_kernel(FooKernelHandle kernel, const FooKernelArgument* arguments, int64_t count) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    std::vector<foo::CompiledKernel::Argument> unpacked(count);
    for (int64_t i = 0; i < count; ++i) {
      const FooKernelArgument& a = arguments[i];
      if (a.tensor != nullptr) unpacked[i].tensor = *torch::aot_inductor::tensor_handle_to_tensor_pointer(a.tensor);
      unpacked[i].integer = a.integer;
      unpacked[i].floating = a.floating;
      unpacked[i].is_floating = a.is_floating != 0;
    }
    kernelOf(kernel)->launch(std::move(unpacked));
  });
}

AOTITorchError foo_aoti_create_stream_guard(void* stream, int32_t device_index, FooStreamGuardHandle* ret_guard) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const c10::DeviceIndex index = device_index < 0 ? foo::currentDevice() : static_cast<c10::DeviceIndex>(device_index);
    auto* guard = new StreamGuard{c10::DeviceGuard(foo::fooDevice(index)), c10::OptionalStreamGuard()};
    if (stream != nullptr) {
      guard->stream.reset_stream(c10::Stream::unpack3(static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(stream)),
                                                      index, c10::DeviceType::PrivateUse1));
    }
    *ret_guard = reinterpret_cast<FooStreamGuardHandle>(guard);
  });
}

AOTITorchError foo_aoti_delete_stream_guard(FooStreamGuardHandle guard) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({ delete reinterpret_cast<StreamGuard*>(guard); });
}
