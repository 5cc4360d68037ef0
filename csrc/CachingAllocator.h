// The foo caching allocator: device memory for foo tensors, reused across allocations like
// c10/cuda's CUDACachingAllocator (block pools, splitting, per-device stats, a memory limit).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

namespace foo {

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  // Allocates on the current foo device; the DataPtr holds a device address.
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);
  void setMemoryFraction(double fraction, c10::DeviceIndex device);
};

CachingAllocator& cachingAllocator();

// A host-side allocator whose memory is foo memory of one device, seen through the kernel view: the
// DataPtrs it returns are CPU-typed and host-accessible. Host kernels that run on foo memory use it
// for the tensors they create, so those land on the device without a copy.
c10::Allocator* kernelViewAllocator(c10::DeviceIndex device);

// Turns a DataPtr from kernelViewAllocator into the owning device DataPtr of the same memory.
c10::DataPtr kernelViewToDevice(c10::DataPtr&& kernel_view, c10::DeviceIndex device);
bool isKernelViewDataPtr(const c10::DataPtr& ptr);

// Grows (or shrinks) a foo storage, keeping its leading bytes.
void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace foo
