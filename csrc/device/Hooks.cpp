// The PrivateUse1 hooks: PyTorch's entry points for device-generic services (autograd's device
// queries, torch.accelerator, storage resizing, pointer ownership, pinned host memory).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>

#include "device/CachingAllocator.h"
#include "device/Common.h"
#include "device/Generator.h"
#include "device/PinnedAllocator.h"

namespace foo {
namespace {

struct FooHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return deviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return fooIsInitialized() != 0; }
  void init() const override { FOO_CHECK(fooInit()); }

  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(foo::deviceCount()); }
  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    checkDeviceIndex(device);
    FOO_CHECK(fooSetDevice(device));
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = currentDevice();
    setCurrentDevice(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return defaultGenerator(device < 0 ? currentDevice() : device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return makeGenerator(device < 0 ? currentDevice() : device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    const int device = fooPointerGetDevice(data);
    TORCH_CHECK(device >= 0, "The pointer ", data, " is not a foo device address");
    return fooDevice(static_cast<c10::DeviceIndex>(device));
  }

  bool isPinnedPtr(const void* data) const override { return isPinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinnedAllocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

const bool g_registered = [] {
  static FooHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

}  // namespace
}  // namespace foo
