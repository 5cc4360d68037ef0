// The caching allocator's memory history, as CUDA's allocator keeps it (torch.foo.memory._record_memory_history):
// the stacks of allocations (and of frees, with RecordContext::ALL), gathered by the recorder Python installs,
// and, with a trace, each device's last actions. AllocatorHistory.cpp also holds the snapshots. Private to the
// caching allocator (CachingAllocator.cpp, AllocatorHistory.cpp).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <memory>
#include <vector>

#include "runtime/foo_runtime.h"

namespace foo::allocator {

// The stack of the caller when the history gathers stacks for `needed` (RecordContext::STATE: allocations;
// ALL: frees too), else nullptr. Called before the allocator's lock is taken: gathering Python frames takes
// the GIL, which the caller may hold.
std::shared_ptr<c10::GatheredContext> gatherContext(c10::CachingDeviceAllocator::RecordContext needed);

// Whether the history keeps stacks at `level` (RecordContext::ALLOC: in the trace's allocation entries).
bool recording(c10::CachingDeviceAllocator::RecordContext level);
// Whether the history records anything (stacks or a trace): torch._C._cuda_isHistoryEnabled's answer.
bool historyEnabled();

// One device's last actions: a ring buffer of its last max_entries TraceEntry, kept while the history
// records a trace. The device's lock guards it.
class TraceRing {
 public:
  explicit TraceRing(c10::DeviceIndex device) : device_(device) {}

  void record(c10::CachingDeviceAllocator::TraceEntry::Action action, const void* addr, size_t size,
              fooStream_t stream, std::shared_ptr<c10::GatheredContext> context) {
    if (max_entries_ != 0) append(action, addr, size, stream, std::move(context));
  }
  // Keeps the newest entries (none with `clear`) within the new limit.
  void resize(size_t max_entries, bool clear);
  // The entries, oldest first.
  std::vector<c10::CachingDeviceAllocator::TraceEntry> ordered() const;

 private:
  void append(c10::CachingDeviceAllocator::TraceEntry::Action action, const void* addr, size_t size,
              fooStream_t stream, std::shared_ptr<c10::GatheredContext> context);

  const c10::DeviceIndex device_;
  std::vector<c10::CachingDeviceAllocator::TraceEntry> entries_;  // next_ is the oldest entry once it is full
  size_t next_ = 0;
  size_t max_entries_ = 0;
};

}  // namespace foo::allocator
