// Runtime-private state shared by the runtime's translation units.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <string>

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
