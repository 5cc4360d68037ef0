// Streams, kernel launches and events. Every kernel and copy enters the device through
// fooLaunchKernel. This executor runs each launch inline on the calling thread, so work completes in
// launch order and events complete when recorded.
#include "foo_runtime.h"
#include "internal.h"

#include <chrono>
#include <mutex>
#include <vector>

namespace foo_runtime {
namespace {

// Priorities follow CUDA: lower numbers are higher priority; 0 is the default.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -1;

struct StreamTable {
  std::mutex mutex;
  std::vector<int> priorities{0};  // index = stream id; stream 0 is the default stream
};

StreamTable g_streams[16];

bool validStream(int device, fooStream_t stream) {
  if (!validDevice(device)) return false;
  std::lock_guard<std::mutex> lock(g_streams[device].mutex);
  return stream >= 0 && static_cast<size_t>(stream) < g_streams[device].priorities.size();
}

}  // namespace
}  // namespace foo_runtime

struct fooEvent {
  bool enable_timing = false;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

using namespace foo_runtime;

extern "C" {

fooError_t fooStreamCreate(int device, fooStream_t* stream, int priority) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (priority > kLeastPriority) priority = kLeastPriority;
  if (priority < kGreatestPriority) priority = kGreatestPriority;
  StreamTable& table = g_streams[device];
  std::lock_guard<std::mutex> lock(table.mutex);
  *stream = static_cast<fooStream_t>(table.priorities.size());
  table.priorities.push_back(priority);
  return fooSuccess;
}

fooError_t fooLaunchKernel(int device, fooStream_t stream, fooKernelFn fn, void* arg) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (stream != 0 && !validStream(device, stream)) return fooErrorInvalidValue;
  fn(arg);
  return fooSuccess;
}

fooError_t fooStreamQuery(int device, fooStream_t stream) {
  return validStream(device, stream) ? fooSuccess : fooErrorInvalidValue;
}

fooError_t fooStreamSynchronize(int device, fooStream_t stream) {
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  return validStream(device, stream) ? fooSuccess : fooErrorInvalidValue;
}

fooError_t fooDeviceSynchronize(int device) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  return ensureInitialized();
}

fooError_t fooEventCreate(fooEvent_t* event, int enable_timing) {
  *event = new fooEvent();
  (*event)->enable_timing = enable_timing != 0;
  return fooSuccess;
}

fooError_t fooEventDestroy(fooEvent_t event) {
  delete event;
  return fooSuccess;
}

fooError_t fooEventRecord(fooEvent_t event, int device, fooStream_t stream) {
  if (event == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return fooSuccess;
}

fooError_t fooEventQuery(fooEvent_t event) { return event == nullptr ? fooErrorInvalidValue : fooSuccess; }

fooError_t fooEventSynchronize(fooEvent_t event) { return event == nullptr ? fooErrorInvalidValue : fooSuccess; }

fooError_t fooStreamWaitEvent(int device, fooStream_t stream, fooEvent_t event) {
  return (event == nullptr || !validStream(device, stream)) ? fooErrorInvalidValue : fooSuccess;
}

fooError_t fooEventElapsedTime(float* ms, fooEvent_t start, fooEvent_t end) {
  if (start == nullptr || end == nullptr || !start->enable_timing || !end->enable_timing) return fooErrorInvalidValue;
  if (!start->recorded || !end->recorded) return fooErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return fooSuccess;
}

}  // extern "C"
