// Runtime-private types shared by stream.cpp (streams and launches), event.cpp (events) and graph.cpp
// (capture and graphs): a launched task, the launches a capture records (GraphNodes, which a capturing
// stream appends to), an event's completion state (EventState, which also orders a graph's launches),
// and what events and graphs ask of a stream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "foo_runtime.h"
#include "internal.h"
#include "sanitizer.h"

namespace foo_runtime {

struct Task {
  fooKernelFn fn;
  void* arg;
  // An event's marker runs under the stream's lock, as the stream counts it done: whoever sees the
  // event complete sees the stream past it, and whoever sees the stream idle sees the event complete.
  bool marker = false;
  TracedLaunch* traced = nullptr;  // when activity tracing follows it
  fooReleaseFn release = nullptr;  // called after fn ran (a task that may be captured has one)
  const char* name = nullptr;      // what a capture calls it
};

// A stream's queue and worker (stream.cpp): named here for GraphNodes::joined, so it is outside stream.cpp's
// anonymous namespace.
class Stream;

// The launches a capture recorded; releases their arguments when the last holder (the graph handle, or a
// queued launch of it) lets go.
struct GraphNodes {
  struct Node {
    fooKernelFn fn;
    void* arg;
    fooReleaseFn release;
    std::string name;
  };
  explicit GraphNodes(int device_index) : device(device_index), capture_id(g_next_capture_id.fetch_add(1) + 1) {}
  static inline std::atomic<unsigned long long> g_next_capture_id{0};
  const int device;
  const unsigned long long capture_id;  // the capture that records it (never 0)
  // While capturing: the streams that joined the capture by waiting on an event recorded in it, and the
  // lock their launches append under (each stream's own lock orders only its own launches).
  std::mutex capture_mutex;
  std::vector<Stream*> joined;
  bool capturing = true;
  std::vector<Node> nodes;
  std::vector<sanitizer::CapturedAccesses> sanitized;  // the sanitizer's record of the nodes' accesses
  void run() const {
    for (const Node& node : nodes) node.fn(node.arg);
  }
  ~GraphNodes() {
    for (const Node& node : nodes) node.release(node.arg);
  }
};

// ---- What events and graphs ask of a stream (stream.cpp) ----
bool validStream(int device, fooStream_t stream);
// Queues the task on the stream (runs it at once with FOO_LAUNCH_BLOCKING=1), or records it while the
// stream captures.
fooError_t launchTask(int device, fooStream_t stream, const Task& task);
// Whether the stream captures (its own capture, or one it joined), and the graph it captures into
// (nullptr when none): without locks while no stream captures.
bool streamCapturing(int device, fooStream_t stream);
std::shared_ptr<GraphNodes> streamCaptureGraph(int device, fooStream_t stream);
// Starts a capture on the stream; fooErrorStreamCaptureUnsupported when it captures already.
fooError_t streamBeginCapture(int device, fooStream_t stream);
// As a CUDA stream waiting on an event recorded in a capture: the stream's later launches join that
// capture, in one order with the capturing stream's.
fooError_t streamJoinCapture(int device, fooStream_t stream, const std::shared_ptr<GraphNodes>& graph);
// Ends the capture the stream began (not one it joined), and the joined streams' part in it.
fooError_t streamEndCapture(int device, fooStream_t stream, std::shared_ptr<GraphNodes>* graph);

// A function to run on a worker; deleted after it ran.
template <class F>
fooError_t launchClosure(int device, fooStream_t stream, F&& f, bool marker = false, TracedLaunch* traced = nullptr) {
  using Closure = std::decay_t<F>;
  auto* closure = new Closure(std::forward<F>(f));
  Task task{[](void* arg) { (*static_cast<Closure*>(arg))(); }, closure, marker, traced,
            [](void* arg) { delete static_cast<Closure*>(arg); }};
  const fooError_t error = launchTask(device, stream, task);
  if (error != fooSuccess) {
    delete closure;
    delete traced;
  }
  return error;
}

}  // namespace foo_runtime

// An interprocess event's counters, in memory every process that shares the event maps (ipc.cpp): the
// generation of its latest record and of its latest completed one, and a futex word bumped at each completion.
struct SharedEventCounters {
  std::atomic<uint64_t> recorded;
  std::atomic<uint64_t> completed;
  std::atomic<uint32_t> wakes;
  std::atomic<uint32_t> waiters;
};
void completeShared(SharedEventCounters& counters, uint64_t generation);
void waitForShared(SharedEventCounters& counters, uint64_t generation);
// An interprocess event created by this process is gone: its counters may serve another.
void releaseSharedEventCounters(SharedEventCounters* counters);

// An event's completion, tracked by generation: each record asks for the next one, and the marker the record
// queues completes it.
struct EventState {
  std::mutex mutex;
  std::condition_variable completed_cv;
  uint64_t recorded = 0;
  uint64_t completed = 0;
  // An interprocess event's counters, used instead of the two above; owned when this process created it.
  SharedEventCounters* shared = nullptr;
  bool owns_shared = false;
  // Recorded last into a capture: a stream that waits on it joins the capture (see fooStreamWaitEvent).
  std::weak_ptr<foo_runtime::GraphNodes> captured_in;
  bool enable_timing = false;
  std::chrono::steady_clock::time_point time;
  // The sanitizer's clock of the latest record (guarded by the sanitizer's lock).
  foo_runtime::sanitizer::Clock sanitizer_clock;

  ~EventState() {
    if (owns_shared) releaseSharedEventCounters(shared);
  }
  // The generations of the latest record and of the latest completed one; the caller holds `mutex`.
  uint64_t latestRecord() const { return shared != nullptr ? shared->recorded.load() : recorded; }
  uint64_t latestCompleted() const { return shared != nullptr ? shared->completed.load() : completed; }
  uint64_t nextRecord() { return shared != nullptr ? shared->recorded.fetch_add(1) + 1 : ++recorded; }

  void complete(uint64_t generation) {
    if (shared != nullptr) {
      completeShared(*shared, generation);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (generation > completed) {
        completed = generation;
        time = std::chrono::steady_clock::now();
      }
    }
    completed_cv.notify_all();
  }
  void waitFor(uint64_t generation) {
    if (shared != nullptr) {
      waitForShared(*shared, generation);
      return;
    }
    std::unique_lock<std::mutex> lock(mutex);
    completed_cv.wait(lock, [&] { return completed >= generation; });
  }
};

// An event's state is shared with the markers and waits still queued, so destroying a recorded event is safe
// (as on CUDA).
struct fooEvent {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};
