// Activity tracing: what a profiler reads of the work the streams run (see foo_runtime.h).
//
// Off, it costs a launch one relaxed atomic load. On, each launch allocates its TracedLaunch; the
// stream's worker stamps the work and keeps the finished launch until a flush hands it out.
#include "foo_runtime.h"
#include "internal.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

namespace foo_runtime {

std::atomic<bool> g_activity_enabled{false};

namespace {

std::atomic<uint64_t> g_trace{0};
std::atomic<uint64_t> g_next_correlation_id{1};
thread_local std::vector<uint64_t> t_external_ids;

struct Finished {
  std::mutex mutex;
  std::vector<TracedLaunch> launches;  // in the order their work completed
};
Finished& finished() {
  static Finished* const instance = new Finished();  // never destroyed: workers may finish at exit
  return *instance;
}

uint64_t threadId() {
  thread_local const uint64_t id = static_cast<uint64_t>(syscall(SYS_gettid));
  return id;
}

}  // namespace

int64_t activityClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TracedLaunch* newTracedLaunch(int device, fooStream_t stream, fooActivityKind kind, const char* name,
                              const char* call) {
  auto* traced = new TracedLaunch();
  traced->kind = kind;
  traced->name = name != nullptr ? name : "kernel";
  traced->call = call;
  traced->device = device;
  traced->stream = stream;
  traced->thread_id = threadId();
  traced->correlation_id = g_next_correlation_id.fetch_add(1, std::memory_order_relaxed);
  traced->external_id = t_external_ids.empty() ? 0 : t_external_ids.back();
  traced->trace = g_trace.load(std::memory_order_relaxed);
  traced->call_start_ns = activityClockNs();
  return traced;
}

void runAndRecord(TracedLaunch* traced, fooKernelFn fn, void* arg) {
  std::unique_ptr<TracedLaunch> owned(traced);
  owned->start_ns = activityClockNs();
  fn(arg);
  owned->end_ns = activityClockNs();
  Finished& done = finished();
  std::lock_guard<std::mutex> lock(done.mutex);
  // Work launched in an earlier trace that completes now belongs to none.
  if (owned->trace == g_trace.load(std::memory_order_relaxed)) done.launches.push_back(std::move(*owned));
}

}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

fooError_t fooActivityEnable(int enable) {
  Finished& done = finished();
  std::lock_guard<std::mutex> lock(done.mutex);
  if (enable) {
    done.launches.clear();
    g_trace.fetch_add(1, std::memory_order_relaxed);
  }
  g_activity_enabled.store(enable != 0, std::memory_order_relaxed);
  return fooSuccess;
}

int fooActivityIsEnabled(void) { return g_activity_enabled.load(std::memory_order_relaxed) ? 1 : 0; }

fooError_t fooActivityPushExternalCorrelationId(uint64_t id) {
  t_external_ids.push_back(id);
  return fooSuccess;
}

fooError_t fooActivityPopExternalCorrelationId(uint64_t* id) {
  if (t_external_ids.empty()) return fooErrorInvalidValue;
  if (id != nullptr) *id = t_external_ids.back();
  t_external_ids.pop_back();
  return fooSuccess;
}

fooError_t fooActivityFlush(fooActivityCallback callback, void* user_data) {
  if (callback == nullptr) return fooErrorInvalidValue;
  std::vector<TracedLaunch> launches;
  {
    Finished& done = finished();
    std::lock_guard<std::mutex> lock(done.mutex);
    launches.swap(done.launches);
  }
  for (const TracedLaunch& launch : launches) {
    fooActivityRecord record{fooActivityKindRuntime, launch.call,           launch.device,
                             launch.stream,          launch.thread_id,      launch.correlation_id,
                             launch.external_id,     launch.call_start_ns, launch.call_end_ns};
    callback(&record, user_data);
    record.kind = launch.kind;
    record.name = launch.name.c_str();
    record.start_ns = launch.start_ns;
    record.end_ns = launch.end_ns;
    callback(&record, user_data);
  }
  return fooSuccess;
}

}  // extern "C"
