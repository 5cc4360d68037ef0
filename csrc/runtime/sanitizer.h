// The sanitizer's hooks into streams, events and graphs (sanitizer.cpp has the checks; foo_runtime.h says
// what they find). Each hook costs one relaxed load while the sanitizer is off.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "foo_runtime.h"

namespace foo_runtime::sanitizer {

extern std::atomic<unsigned> g_checks;
inline bool on() { return g_checks.load(std::memory_order_relaxed) != 0; }

// A vector clock: entry i counts the launches of the i-th stream the sanitizer met that are known to come
// before. An event keeps the clock of its stream at its record; a graph the clock of its last launch.
using Clock = std::vector<uint64_t>;

// A launch a capture recorded: checked again at each launch of its graph.
struct CapturedAccesses {
  std::vector<fooMemoryAccess> accesses;
  std::shared_ptr<void> context;
};

// Memory newly mapped at these addresses (opened from another process): no history, written as far as it knows.
void forget(const void* address, size_t bytes);
// The host waited for the work launched so far on the stream (a synchronization, a query that found it
// done, a synchronous run), or on the device's streams.
void hostWaitedForStream(int device, fooStream_t stream);
void hostWaitedForDevice(int device);
void eventRecorded(Clock& event_clock, int device, fooStream_t stream);
// The stream's later launches come after the event's record; the host's later calls do.
void streamWaitedForEvent(int device, fooStream_t stream, const Clock& event_clock);
void hostWaitedForEvent(const Clock& event_clock);
// A graph launch: its captured accesses as one launch on the stream, after the graph's previous launch
// (`graph_clock`, updated); with `check`, fooErrorHazard (nothing recorded) when one conflicts.
fooError_t graphLaunched(const std::vector<CapturedAccesses>& captured, Clock& graph_clock, int device,
                         fooStream_t stream, bool check);

}  // namespace foo_runtime::sanitizer
