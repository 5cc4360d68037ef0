// The sanitizer (foo_runtime.h says what it finds): happens-before between launches by vector clocks, and a
// shadow of device memory that remembers, for each range of bytes, its last write, the last read of each
// stream since, whether it was written since its allocation, and the free that returned it to the cache.
//
// Launch order on a stream, event records and waits, graph launches and the host's waits make the clocks:
// a launch on stream S takes S's clock, merged with the host's (the host launches it after all it waited
// for), and ticks S's own entry; that entry, the launch's epoch, marks its accesses. An earlier access of
// stream T at epoch e comes before a launch whose clock C has C[T] >= e. One lock guards everything: the
// sanitizer is a debugging mode, and its calls are short. Contexts it lets go are released after the lock
// (a release may need the launcher's own locks, such as Python's).
#include "sanitizer.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "internal.h"
#include "stream_internal.h"

namespace foo_runtime::sanitizer {

std::atomic<unsigned> g_checks{0};

namespace {

using Context = std::shared_ptr<void>;

struct Access {
  uint32_t slot;   // the stream's index among the streams the sanitizer met
  uint64_t epoch;  // the launch's tick of its stream's clock
  Context context;
  uint32_t index;  // which of its launch's accesses
  bool operator==(const Access& other) const {
    return slot == other.slot && epoch == other.epoch && context == other.context && index == other.index;
  }
};

// A range of bytes [start, end) whose bytes share their history; the map key is its start.
struct Segment {
  uintptr_t end;
  bool initialized = true;  // bytes the sanitizer never saw allocated count as written
  std::optional<Access> write;
  std::vector<Access> reads;  // since the write, the last of each stream
  Context freed_by;           // in the allocator's cache since this free; null while allocated
  bool sameHistory(const Segment& other) const {
    return initialized == other.initialized && write == other.write && reads == other.reads &&
           freed_by == other.freed_by;
  }
};

struct StreamClock {
  int device;
  fooStream_t stream;
  Clock clock;
};

struct State {
  std::mutex mutex;
  fooContextRetainFn retain = nullptr;
  fooReleaseFn release = nullptr;
  std::vector<StreamClock> streams;
  std::unordered_map<int64_t, uint32_t> slots;  // device * 2^32 + stream -> index into streams
  Clock host;
  std::map<uintptr_t, Segment> shadow;
};

State& state() {
  static State* const instance = new State();  // never destroyed: streams may still report at exit
  return *instance;
}

// The calling thread's last hazard, holding its contexts.
struct LastHazard {
  fooHazard hazard{};
  Context context, prior, freed;
};
thread_local LastHazard t_last_hazard;
thread_local int t_hidden_waits = 0;  // fooSanitizerHideHostWaits

// Forgets the thread's last hazard at the start of a call; the caller lets the result go after its lock.
LastHazard takeLastHazard() {
  LastHazard previous = std::move(t_last_hazard);
  t_last_hazard = LastHazard{};
  return previous;
}

// Contexts let go of during a call, released once its lock is let go (declared before the lock).
using Dropped = std::vector<Context>;

uint64_t entry(const Clock& clock, uint32_t slot) { return slot < clock.size() ? clock[slot] : 0; }

void merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

bool orderedBefore(const Access& access, const Clock& clock) { return entry(clock, access.slot) >= access.epoch; }

uint32_t slotOf(State& s, int device, fooStream_t stream) {
  const int64_t key = (static_cast<int64_t>(device) << 32) + stream;
  const auto [it, added] = s.slots.emplace(key, static_cast<uint32_t>(s.streams.size()));
  if (added) s.streams.push_back({device, stream, {}});
  return it->second;
}

Context adopt(State& s, void* context) {
  if (context == nullptr) return nullptr;
  if (s.retain != nullptr) context = s.retain(context);
  return Context(context, [release = s.release](void* c) {
    if (release != nullptr) release(c);
  });
}

// Splits the segment at `it` so that a segment starts at `at` (inside it); returns that segment.
std::map<uintptr_t, Segment>::iterator split(std::map<uintptr_t, Segment>& shadow,
                                             std::map<uintptr_t, Segment>::iterator it, uintptr_t at) {
  Segment tail = it->second;
  it->second.end = at;
  return shadow.emplace_hint(std::next(it), at, std::move(tail));
}

// Makes [begin, end) exactly a run of segments (bytes without history get a segment of their own) and
// returns its first.
std::map<uintptr_t, Segment>::iterator carve(std::map<uintptr_t, Segment>& shadow, uintptr_t begin, uintptr_t end) {
  auto it = shadow.upper_bound(begin);
  if (it != shadow.begin()) {
    auto before = std::prev(it);
    if (before->second.end > begin) it = before->first < begin ? split(shadow, before, begin) : before;
  }
  auto first = shadow.end();
  for (uintptr_t cursor = begin; cursor < end;) {
    if (it == shadow.end() || it->first > cursor) {
      const uintptr_t gap_end = it == shadow.end() ? end : std::min(end, it->first);
      it = shadow.emplace_hint(it, cursor, Segment{gap_end});
    } else if (it->second.end > end) {
      split(shadow, it, end);
    }
    if (first == shadow.end()) first = it;
    cursor = it->second.end;
    ++it;
  }
  return first;
}

// Joins the segments around [begin, end) that continue each other with the same history.
void coalesce(std::map<uintptr_t, Segment>& shadow, uintptr_t begin, uintptr_t end) {
  auto it = shadow.lower_bound(begin);
  if (it != shadow.begin()) --it;
  while (it != shadow.end() && it->first <= end) {
    auto next = std::next(it);
    if (next != shadow.end() && next->first == it->second.end && it->second.sameHistory(next->second)) {
      it->second.end = next->second.end;
      shadow.erase(next);
    } else {
      it = next;
    }
  }
}

// Calls visit(segment) for each segment overlapping [begin, end) until it returns true.
template <class Visit>
bool anyOverlapping(std::map<uintptr_t, Segment>& shadow, uintptr_t begin, uintptr_t end, Visit&& visit) {
  auto it = shadow.upper_bound(begin);
  if (it != shadow.begin() && std::prev(it)->second.end > begin) --it;
  for (; it != shadow.end() && it->first < end; ++it) {
    if (visit(it->first, it->second)) return true;
  }
  return false;
}

void drop(Segment& segment, Dropped& dropped) {
  if (segment.write) dropped.push_back(std::move(segment.write->context));
  for (Access& read : segment.reads) dropped.push_back(std::move(read.context));
  segment.write.reset();
  segment.reads.clear();
}

void setHazard(fooHazardKind kind, int device, fooStream_t stream, const Context& context, size_t access,
               uintptr_t begin, uintptr_t end, const Segment& segment, uintptr_t segment_start,
               const Access* prior, bool prior_write) {
  State& s = state();
  LastHazard& last = t_last_hazard;
  last.context = context;
  last.prior = prior != nullptr ? prior->context : nullptr;
  last.freed = segment.freed_by;
  fooHazard& h = last.hazard;
  h = fooHazard{};
  h.kind = kind;
  h.device = device;
  h.stream = stream;
  h.context = context.get();
  h.access = access;
  const uintptr_t first = std::max(begin, segment_start);
  h.address = reinterpret_cast<const void*>(first);
  h.bytes = std::min(end, segment.end) - first;
  if (prior != nullptr) {
    h.prior_context = prior->context.get();
    h.prior_access = prior->index;
    h.prior_write = prior_write ? 1 : 0;
    h.prior_device = s.streams[prior->slot].device;
    h.prior_stream = s.streams[prior->slot].stream;
  }
  h.free_context = segment.freed_by.get();
}

// Whether one of the launch's accesses writes bytes of [begin, end): its reads of them are not checked for
// initialization (an in-place operator's, or an out= argument also passed as an input that the kernel
// ignores, as addmv's self with beta=0).
bool writtenByTheLaunch(const fooMemoryAccess* accesses, size_t count, uintptr_t begin, uintptr_t end) {
  for (size_t j = 0; j < count; ++j) {
    const auto start = reinterpret_cast<uintptr_t>(accesses[j].address);
    if (accesses[j].write && start < end && begin < start + accesses[j].bytes) return true;
  }
  return false;
}

// The first hazard `checks` find among a launch's accesses, made at `clock` on stream `slot`; recorded in
// t_last_hazard.
bool findHazard(State& s, uint32_t slot, const Clock& clock, const fooMemoryAccess* accesses, size_t count,
                const Context* contexts, const uint32_t* indices,
                unsigned checks = g_checks.load(std::memory_order_relaxed)) {
  const StreamClock& stream = s.streams[slot];
  for (size_t i = 0; i < count; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(accesses[i].address);
    const uintptr_t end = begin + accesses[i].bytes;
    const bool write = accesses[i].write != 0;
    const bool found = anyOverlapping(s.shadow, begin, end, [&](uintptr_t start, const Segment& segment) {
      const auto report = [&](fooHazardKind kind, const Access* prior, bool prior_write) {
        setHazard(kind, stream.device, stream.stream, contexts[i], indices[i], begin, end, segment, start, prior,
                  prior_write);
        return true;
      };
      if (checks & fooSanitizerRaces) {
        if (segment.write && !orderedBefore(*segment.write, clock)) {
          return report(write ? fooHazardWriteAfterWrite : fooHazardReadAfterWrite, &*segment.write, true);
        }
        if (write) {
          for (const Access& read : segment.reads) {
            if (!orderedBefore(read, clock)) return report(fooHazardWriteAfterRead, &read, false);
          }
        }
      }
      if ((checks & fooSanitizerInitialization) && !write && !segment.initialized && !accesses[i].span &&
          !writtenByTheLaunch(accesses, count, start, segment.end)) {
        return report(fooHazardUninitializedRead, nullptr, false);
      }
      return false;
    });
    if (found) return true;
  }
  return false;
}

void recordAccesses(State& s, uint32_t slot, uint64_t epoch, const fooMemoryAccess* accesses, size_t count,
                    const Context* contexts, const uint32_t* indices, Dropped& dropped) {
  for (size_t i = 0; i < count; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(accesses[i].address);
    const uintptr_t end = begin + accesses[i].bytes;
    if (begin == end) continue;
    const Access access{slot, epoch, contexts[i], indices[i]};
    for (auto it = carve(s.shadow, begin, end); it != s.shadow.end() && it->first < end; ++it) {
      Segment& segment = it->second;
      if (accesses[i].write) {
        drop(segment, dropped);
        segment.write = access;
        segment.initialized = true;
      } else {
        const auto same_stream = std::find_if(segment.reads.begin(), segment.reads.end(),
                                              [&](const Access& read) { return read.slot == slot; });
        if (same_stream != segment.reads.end()) {
          dropped.push_back(std::move(same_stream->context));
          *same_stream = access;
        } else {
          segment.reads.push_back(access);
        }
      }
    }
    coalesce(s.shadow, begin, end);
  }
}

// The clock of the stream's next launch, ticked; its epoch is the stream's own entry.
Clock& tick(State& s, uint32_t slot) {
  Clock& clock = s.streams[slot].clock;
  merge(clock, s.host);
  if (clock.size() <= slot) clock.resize(slot + 1, 0);
  ++clock[slot];
  return clock;
}

fooError_t launch(int device, fooStream_t stream, const fooMemoryAccess* accesses, size_t count, void* context,
                  bool check) {
  if (!on() || fooIsInBadFork()) return fooSuccess;  // a forked child's launches fail: the device is the parent's
  if (!validStream(device, stream) || (accesses == nullptr && count != 0)) return fooErrorInvalidValue;
  State& s = state();
  Dropped dropped;
  const LastHazard previous = takeLastHazard();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Context shared = adopt(s, context);
  if (std::shared_ptr<GraphNodes> graph = streamCaptureGraph(device, stream)) {
    std::lock_guard<std::mutex> capture_lock(graph->capture_mutex);
    graph->sanitized.push_back({std::vector<fooMemoryAccess>(accesses, accesses + count), shared});
    return fooSuccess;
  }
  const uint32_t slot = slotOf(s, device, stream);
  const Clock& clock = tick(s, slot);
  const std::vector<Context> contexts(count, shared);
  std::vector<uint32_t> indices(count);
  for (size_t i = 0; i < count; ++i) indices[i] = static_cast<uint32_t>(i);
  if (check && findHazard(s, slot, clock, accesses, count, contexts.data(), indices.data())) return fooErrorHazard;
  recordAccesses(s, slot, clock[slot], accesses, count, contexts.data(), indices.data(), dropped);
  return fooSuccess;
}

}  // namespace

void forget(const void* address, size_t bytes) {
  if (!on()) return;
  State& s = state();
  Dropped dropped;
  std::lock_guard<std::mutex> lock(s.mutex);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  for (auto it = carve(s.shadow, begin, begin + bytes); it != s.shadow.end() && it->first < begin + bytes;) {
    drop(it->second, dropped);
    dropped.push_back(std::move(it->second.freed_by));
    it = s.shadow.erase(it);
  }
}

void hostWaitedForStream(int device, fooStream_t stream) {
  if (!on() || t_hidden_waits > 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  merge(s.host, s.streams[slotOf(s, device, stream)].clock);
}

void hostWaitedForDevice(int device) {
  if (!on() || t_hidden_waits > 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const StreamClock& stream : s.streams) {
    if (stream.device == device) merge(s.host, stream.clock);
  }
}

void eventRecorded(Clock& event_clock, int device, fooStream_t stream) {
  if (!on()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Clock& clock = s.streams[slotOf(s, device, stream)].clock;
  merge(clock, s.host);
  event_clock = clock;
}

void streamWaitedForEvent(int device, fooStream_t stream, const Clock& event_clock) {
  if (!on()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  merge(s.streams[slotOf(s, device, stream)].clock, event_clock);
}

void hostWaitedForEvent(const Clock& event_clock) {
  if (!on() || t_hidden_waits > 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  merge(s.host, event_clock);
}

fooError_t graphLaunched(const std::vector<CapturedAccesses>& captured, Clock& graph_clock, int device,
                         fooStream_t stream, bool check) {
  if (!on()) return fooSuccess;
  State& s = state();
  Dropped dropped;
  const LastHazard previous = takeLastHazard();
  std::lock_guard<std::mutex> lock(s.mutex);
  const uint32_t slot = slotOf(s, device, stream);
  merge(s.streams[slot].clock, graph_clock);
  const Clock& clock = tick(s, slot);
  // One launch: every captured access, each with its own launch's context.
  std::vector<fooMemoryAccess> accesses;
  std::vector<Context> contexts;
  std::vector<uint32_t> indices;
  for (const CapturedAccesses& launch : captured) {
    for (size_t i = 0; i < launch.accesses.size(); ++i) {
      accesses.push_back(launch.accesses[i]);
      contexts.push_back(launch.context);
      indices.push_back(static_cast<uint32_t>(i));
    }
  }
  // Races first, for all of it; then each captured launch in turn, for reads of memory never written: a
  // launch reads what the graph's earlier launches wrote (an uninitialised read found there leaves the
  // launches before it recorded).
  const unsigned checks = g_checks.load(std::memory_order_relaxed);
  if (check && findHazard(s, slot, clock, accesses.data(), accesses.size(), contexts.data(), indices.data(),
                          checks & fooSanitizerRaces)) {
    return fooErrorHazard;
  }
  size_t begin = 0;
  for (const CapturedAccesses& launch : captured) {
    const size_t n = launch.accesses.size();
    if (check && findHazard(s, slot, clock, accesses.data() + begin, n, contexts.data() + begin, indices.data() + begin,
                            checks & fooSanitizerInitialization)) {
      return fooErrorHazard;
    }
    recordAccesses(s, slot, clock[slot], accesses.data() + begin, n, contexts.data() + begin, indices.data() + begin,
                   dropped);
    begin += n;
  }
  graph_clock = clock;
  return fooSuccess;
}

}  // namespace foo_runtime::sanitizer

using namespace foo_runtime;
using namespace foo_runtime::sanitizer;

extern "C" {

fooError_t fooSanitizerEnable(unsigned checks) {
  if ((checks & ~static_cast<unsigned>(fooSanitizerRaces | fooSanitizerInitialization)) != 0) {
    return fooErrorInvalidValue;
  }
  State& s = state();
  std::map<uintptr_t, Segment> forgotten;
  const LastHazard previous = takeLastHazard();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (checks == 0) {
    forgotten.swap(s.shadow);
    s.streams.clear();
    s.slots.clear();
    s.host.clear();
  }
  g_checks.store(checks, std::memory_order_relaxed);
  return fooSuccess;
}

unsigned fooSanitizerGetChecks(void) { return g_checks.load(std::memory_order_relaxed); }

fooError_t fooSanitizerSetContextCallbacks(fooContextRetainFn retain, fooReleaseFn release) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.retain = retain;
  s.release = release;
  return fooSuccess;
}

fooError_t fooSanitizerCheckLaunch(int device, fooStream_t stream, const fooMemoryAccess* accesses, size_t count,
                                   void* context) {
  return launch(device, stream, accesses, count, context, /*check=*/true);
}

fooError_t fooSanitizerRecordLaunch(int device, fooStream_t stream, const fooMemoryAccess* accesses, size_t count,
                                    void* context) {
  return launch(device, stream, accesses, count, context, /*check=*/false);
}

fooError_t fooSanitizerFree(int device, fooStream_t stream, const void* address, size_t bytes, void* context) {
  if (!on() || fooIsInBadFork()) return fooSuccess;
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  State& s = state();
  Dropped dropped;
  std::lock_guard<std::mutex> lock(s.mutex);
  const Context shared = adopt(s, context);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  for (auto it = carve(s.shadow, begin, begin + bytes); it != s.shadow.end() && it->first < begin + bytes; ++it) {
    dropped.push_back(std::move(it->second.freed_by));
    it->second.freed_by = shared;
  }
  coalesce(s.shadow, begin, begin + bytes);
  return fooSuccess;
}

fooError_t fooSanitizerAllocate(int device, fooStream_t stream, const void* address, size_t bytes, void* context) {
  if (!on() || fooIsInBadFork()) return fooSuccess;
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  State& s = state();
  Dropped dropped;
  const LastHazard previous = takeLastHazard();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Context shared = adopt(s, context);
  const uint32_t slot = slotOf(s, device, stream);
  // The new owner's work runs on `stream`, after what the host waited for.
  Clock clock = s.streams[slot].clock;
  merge(clock, s.host);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  const uintptr_t end = begin + bytes;
  fooError_t result = fooSuccess;
  if (g_checks.load(std::memory_order_relaxed) & fooSanitizerRaces) {
    anyOverlapping(s.shadow, begin, end, [&](uintptr_t start, const Segment& segment) {
      const Access* pending = nullptr;
      if (segment.write && !orderedBefore(*segment.write, clock)) pending = &*segment.write;
      for (const Access& read : segment.reads) {
        if (pending == nullptr && !orderedBefore(read, clock)) pending = &read;
      }
      if (pending == nullptr) return false;
      setHazard(fooHazardReuse, device, stream, shared, 0, begin, end, segment, start, pending,
                segment.write && pending == &*segment.write);
      result = fooErrorHazard;
      return true;
    });
  }
  for (auto it = carve(s.shadow, begin, end); it != s.shadow.end() && it->first < end; ++it) {
    drop(it->second, dropped);
    dropped.push_back(std::move(it->second.freed_by));
    it->second.initialized = false;
  }
  coalesce(s.shadow, begin, end);
  return result;
}

fooError_t fooSanitizerHideHostWaits(int hide) {
  if (!hide && t_hidden_waits == 0) return fooErrorInvalidValue;
  t_hidden_waits += hide ? 1 : -1;
  return fooSuccess;
}

fooError_t fooSanitizerGetLastHazard(fooHazard* hazard) {
  if (hazard == nullptr || t_last_hazard.hazard.kind == 0) return fooErrorInvalidValue;
  *hazard = t_last_hazard.hazard;
  return fooSuccess;
}

}  // extern "C"
