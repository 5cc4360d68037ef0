// Runtime-private state shared by the runtime's translation units.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "foo_runtime.h"

namespace foo_runtime {

// Page-granular ranges of an address range, handed out first fit and coalesced when given back.
class RangeAllocator {
 public:
  void init(size_t bytes) { free_ranges_.emplace(0, bytes); }
  // The offset of a free range of `bytes`, or false when none is that large.
  bool allocate(size_t bytes, size_t* offset);
  // Gives back the range starting at `offset`; false when no allocated range starts there.
  bool release(size_t offset);
  // The allocated range holding `offset`.
  bool containing(size_t offset, size_t* start, size_t* bytes) const;
  size_t used() const { return used_; }

 private:
  std::map<size_t, size_t> free_ranges_;  // offset -> size, address ordered for coalescing
  std::map<size_t, size_t> allocated_;    // offset -> size
  size_t used_ = 0;
};

constexpr size_t kPage = 4096;
inline size_t roundToPages(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// One simulated device. Its memory is a memfd: device addresses are a reservation with no access rights
// (what host code dereferences faults), kernels reach the same bytes through the kernel view, mapped
// read/write at the same offset. Past the device's own memory, both views go on with a window where memory
// other processes shared is mapped (ipc.cpp): it is device memory of this device too, not counted as its own.
struct DeviceMemory {
  char* device_base = nullptr;
  char* kernel_base = nullptr;
  size_t size = 0;    // the device's own memory
  size_t window = 0;  // the imported memory's window, after it
  int fd = -1;        // the memfd, kept open so that other processes can map it
  std::mutex mutex;   // guards the allocators
  RangeAllocator own;
  RangeAllocator imports;
  bool contains(const char* device_address) const {
    return device_address >= device_base && device_address < device_base + size + window;
  }
};

int deviceCount();
bool validDevice(int device);
// Initialises the runtime on first use: fooSuccess, fooErrorInitialization when mapping device memory
// failed, fooErrorForkedProcess in a child forked after initialisation.
fooError_t ensureInitialized();
DeviceMemory& deviceMemory(int device);
// Called once by ensureInitialized for each device.
bool mapDeviceMemory(int device, size_t bytes);

// ---- Sharing with other processes (ipc.cpp) ----
// A random number naming this process's shareable files (device memory, interprocess events).
uint64_t processToken();
// The name of this process's memfd of `device`'s memory.
std::string deviceFileName(int device);

// ---- Activity tracing (activity.cpp) ----
// One launch followed by tracing, from its call on the host to the end of its work on the stream.
struct TracedLaunch {
  fooActivityKind kind;
  std::string name;
  const char* call;  // the runtime call that launched it
  int device;
  fooStream_t stream;
  uint64_t thread_id;
  uint64_t correlation_id;
  uint64_t external_id;
  uint64_t trace;  // the trace it belongs to (each enabling starts one)
  int64_t call_start_ns, call_end_ns, start_ns, end_ns;
};
int64_t activityClockNs();
extern std::atomic<bool> g_activity_enabled;
TracedLaunch* newTracedLaunch(int device, fooStream_t stream, fooActivityKind kind, const char* name, const char* call);
void runAndRecord(TracedLaunch* traced, fooKernelFn fn, void* arg);

// At a launch call: a new TracedLaunch (its call's start stamped) when tracing is on, else nullptr. Inline:
// with tracing off, a launch pays one relaxed load.
inline TracedLaunch* traceLaunch(int device, fooStream_t stream, fooActivityKind kind, const char* name,
                                 const char* call) {
  if (!g_activity_enabled.load(std::memory_order_relaxed)) return nullptr;
  return newTracedLaunch(device, stream, kind, name, call);
}
// Runs fn(arg); with `traced`, stamps the work's start and end, keeps the records and deletes `traced`.
inline void runTraced(TracedLaunch* traced, fooKernelFn fn, void* arg) {
  if (traced == nullptr) {
    fn(arg);
  } else {
    runAndRecord(traced, fn, arg);
  }
}

}  // namespace foo_runtime
