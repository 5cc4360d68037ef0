// foo's C functions for generated C++ code (foo_backend/aoti.h): a handle per Inductor kernel and its launch,
// through the same CompiledKernel the Python wrapper calls.
#include <foo_backend/aoti.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiled/CompiledKernel.h"
#include "device/Common.h"

namespace {

foo::CompiledKernel* kernelOf(FooKernelHandle handle) {
  return reinterpret_cast<foo::CompiledKernel*>(handle);
}

// The foo copies of AOTInductor models' host constants, by constant and device; an entry goes with its constant.
struct DeviceConstant {
  c10::weak_intrusive_ptr<c10::TensorImpl> host;
  at::Tensor device;
};
using DeviceConstants = std::map<std::pair<const c10::TensorImpl*, c10::DeviceIndex>, DeviceConstant>;
std::mutex device_constants_mutex;
// Never destroyed: the device memory of copies still cached at exit is not given back to a runtime already gone.
DeviceConstants& device_constants = *new DeviceConstants();

at::Tensor deviceConstant(const at::Tensor& constant, c10::DeviceIndex index) {
  if (constant.device() == foo::fooDevice(index)) return constant;
  TORCH_CHECK(constant.device().is_cpu(), "foo: an AOTInductor model on foo:", static_cast<int>(index),
              " was given a constant on ", constant.device());
  const std::pair<const c10::TensorImpl*, c10::DeviceIndex> key(constant.unsafeGetTensorImpl(), index);
  std::lock_guard<std::mutex> lock(device_constants_mutex);
  // An entry whose constant is alive is this constant's: no other tensor can have its address meanwhile.
  auto it = device_constants.find(key);
  if (it != device_constants.end() && !it->second.host.expired()) return it->second.device;
  for (auto entry = device_constants.begin(); entry != device_constants.end();) {
    entry = entry->second.host.expired() ? device_constants.erase(entry) : std::next(entry);
  }
  at::Tensor copy = constant.to(foo::fooDevice(index), /*non_blocking=*/false, /*copy=*/true);
  device_constants.insert_or_assign(
      key, DeviceConstant{c10::weak_intrusive_ptr<c10::TensorImpl>(constant.getIntrusivePtr()), copy});
  return copy;
}

// A device index of foo's C functions: -1 is the current device.
c10::DeviceIndex deviceIndexOrCurrent(int32_t device_index) {
  return device_index < 0 ? foo::currentDevice() : static_cast<c10::DeviceIndex>(device_index);
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
    const c10::DeviceIndex index = deviceIndexOrCurrent(device_index);
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

AOTITorchError foo_aoti_device_constant(AtenTensorHandle constant, int32_t device_index,
                                        AtenTensorHandle* ret_constant) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const c10::DeviceIndex index = deviceIndexOrCurrent(device_index);
    *ret_constant = torch::aot_inductor::new_tensor_handle(
        deviceConstant(*torch::aot_inductor::tensor_handle_to_tensor_pointer(constant), index));
  });
}
