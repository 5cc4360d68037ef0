// Runtime-private state shared by the runtime's translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "foo_runtime.h"

namespace foo_runtime {

// One simulated device: its memory is a memfd mapped twice, once with no access (the device
// addresses handed to users) and once read/write (the kernel view).
struct DeviceMemory {
  char* device_base = nullptr;
  char* kernel_base = nullptr;
  size_t size = 0;
};

int deviceCount();
bool validDevice(int device);
// Initialises the runtime on first use: fooSuccess, fooErrorInitialization when mapping device memory
// failed, fooErrorForkedProcess in a child forked after initialisation.
fooError_t ensureInitialized();
DeviceMemory& deviceMemory(int device);
// Called once by ensureInitialized for each device.
bool mapDeviceMemory(int device, size_t bytes);

}  // namespace foo_runtime
