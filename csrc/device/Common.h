// Shared helpers of the PyTorch integration: error checking of runtime calls and device indices.
#pragma once

#include <c10/core/Device.h>
#include <vector>
#include <c10/util/Exception.h>

#include "runtime/foo_runtime.h"

#define FOO_CHECK(expr)                                                                              \
  do {                                                                                               \
    const fooError_t foo_check_error = (expr);                                                       \
    TORCH_CHECK(foo_check_error == fooSuccess, "foo runtime error: ", fooGetErrorString(foo_check_error)); \
  } while (0)

namespace foo {

inline int deviceCount() {
  int count = 0;
  fooGetDeviceCount(&count);
  return count;
}

// Raises the contract's error for an index outside [0, device_count).
inline void checkDeviceIndex(c10::DeviceIndex index) {
  const int count = deviceCount();
  TORCH_CHECK(
      index >= 0 && index < count, "Invalid device foo:", static_cast<int>(index), ": foo has ", count,
      count == 1 ? " device" : " devices", " (valid device indices are 0 to ", count - 1, ")");
}

inline c10::DeviceIndex currentDevice() {
  int device = 0;
  fooGetDevice(&device);
  return static_cast<c10::DeviceIndex>(device);
}

inline c10::Device fooDevice(c10::DeviceIndex index) { return c10::Device(c10::DeviceType::PrivateUse1, index); }

// The contract's error for arguments of one call on two devices (as CUDA words it).
[[noreturn]] inline void raiseMixedDevices(const char* op, c10::Device a, c10::Device b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ", b,
              "! (when checking arguments for ", op, ")");
}

// One object per foo device: make(index) for every index.
template <class Make>
auto perDevice(Make make) {
  std::vector<decltype(make(c10::DeviceIndex{0}))> objects;
  for (int d = 0; d < deviceCount(); ++d) objects.push_back(make(static_cast<c10::DeviceIndex>(d)));
  return objects;
}

}  // namespace foo
