// The current stream of each foo device (per thread, as in c10/cuda) and the launch path: every kernel
// and copy on foo memory goes through launchKernel onto the current stream.
#pragma once

#include <c10/core/Device.h>

#include <type_traits>
#include <utility>

#include "Common.h"

namespace foo {

fooStream_t currentStream(c10::DeviceIndex device);
void setCurrentStream(c10::DeviceIndex device, fooStream_t stream);

// Launches `kernel()` onto `device`'s current stream.
template <class Kernel>
void launchKernel(c10::DeviceIndex device, Kernel&& kernel) {
  using K = std::remove_reference_t<Kernel>;
  FOO_CHECK(fooLaunchKernel(
      device, currentStream(device), [](void* arg) { (*static_cast<K*>(arg))(); },
      const_cast<void*>(static_cast<const void*>(&kernel))));
}

}  // namespace foo
