// Events (fooEvent*, fooStreamWaitEvent): markers in a stream's queue. A record queues a marker that
// completes the event when the stream's worker reaches it; a wait queues work that waits for the
// event's latest record to complete. A record in a capture marks a point of the graph instead, and a
// stream that waits on it joins the capture (graph.cpp has the capture's calls). An event's state,
// EventState, is in stream_internal.h: a graph orders its launches with one too.
#include "foo_runtime.h"
#include "internal.h"
#include "stream_internal.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

using namespace foo_runtime;

namespace {

// The capture `state` was recorded into last, while that capture lasts; the caller holds state->mutex.
std::shared_ptr<GraphNodes> openCaptureOf(EventState& state) {
  std::shared_ptr<GraphNodes> graph = state.captured_in.lock();
  if (graph == nullptr) return nullptr;
  std::lock_guard<std::mutex> capture_lock(graph->capture_mutex);
  return graph->capturing ? graph : nullptr;
}

}  // namespace

extern "C" {

fooError_t fooEventCreate(fooEvent_t* event, int enable_timing) {
  *event = new fooEvent();
  (*event)->state->enable_timing = enable_timing != 0;
  return fooSuccess;
}

fooError_t fooEventDestroy(fooEvent_t event) {
  delete event;
  return fooSuccess;
}

fooError_t fooEventRecord(fooEvent_t event, int device, fooStream_t stream) {
  if (event == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  std::shared_ptr<EventState> state = event->state;
  if (std::shared_ptr<GraphNodes> graph = streamCaptureGraph(device, stream)) {
    // A record in a capture marks a point of the graph, which nothing on the host can wait for; the
    // graph runs its launches in order, so it needs no marker either.
    std::lock_guard<std::mutex> lock(state->mutex);
    state->captured_in = graph;
    return fooSuccess;
  }
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->captured_in.reset();
    generation = state->nextRecord();
  }
  sanitizer::eventRecorded(state->sanitizer_clock, device, stream);
  return launchClosure(device, stream, [state, generation] { state->complete(generation); }, /*marker=*/true);
}

fooError_t fooEventQuery(fooEvent_t event) {
  if (event == nullptr) return fooErrorInvalidValue;
  {
    std::lock_guard<std::mutex> lock(event->state->mutex);
    if (openCaptureOf(*event->state) != nullptr) return fooErrorStreamCaptureUnsupported;
    if (event->state->latestCompleted() < event->state->latestRecord()) return fooErrorNotReady;
  }
  sanitizer::hostWaitedForEvent(event->state->sanitizer_clock);
  return fooSuccess;
}

fooError_t fooEventSynchronize(fooEvent_t event) {
  if (event == nullptr) return fooErrorInvalidValue;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(event->state->mutex);
    if (openCaptureOf(*event->state) != nullptr) return fooErrorStreamCaptureUnsupported;
    generation = event->state->latestRecord();
  }
  event->state->waitFor(generation);
  sanitizer::hostWaitedForEvent(event->state->sanitizer_clock);
  return fooSuccess;
}

fooError_t fooStreamWaitEvent(int device, fooStream_t stream, fooEvent_t event) {
  if (event == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  std::shared_ptr<EventState> state = event->state;
  std::shared_ptr<GraphNodes> graph;
  uint64_t generation = 0;
  bool done = false;
  {
    // Not holding it while taking a stream's lock: a stream's worker completes events under that lock.
    std::lock_guard<std::mutex> lock(state->mutex);
    graph = openCaptureOf(*state);
    generation = state->latestRecord();
    done = state->latestCompleted() >= generation;
  }
  if (graph != nullptr) {
    if (graph->device != device) return fooErrorInvalidValue;  // a graph runs on one device
    return streamJoinCapture(device, stream, graph);
  }
  // A capture waits only on its own points: work outside it would not be in its replays.
  if (streamCapturing(device, stream)) return fooErrorStreamCaptureUnsupported;
  sanitizer::streamWaitedForEvent(device, stream, state->sanitizer_clock);
  if (done) return fooSuccess;  // nothing to wait for
  return launchClosure(device, stream, [state, generation] { state->waitFor(generation); });
}

fooError_t fooEventElapsedTime(float* ms, fooEvent_t start, fooEvent_t end) {
  if (start == nullptr || end == nullptr || !start->state->enable_timing || !end->state->enable_timing) {
    return fooErrorInvalidValue;
  }
  std::chrono::steady_clock::time_point times[2];
  EventState* states[2] = {start->state.get(), end->state.get()};
  for (int i = 0; i < 2; ++i) {
    std::lock_guard<std::mutex> lock(states[i]->mutex);
    if (states[i]->recorded == 0 || states[i]->completed < states[i]->recorded) return fooErrorNotReady;
    times[i] = states[i]->time;
  }
  *ms = std::chrono::duration<float, std::milli>(times[1] - times[0]).count();
  return fooSuccess;
}

}  // extern "C"
