// The caching allocator's memory history and snapshots (model: the history and snapshot parts of
// c10/cuda/CUDACachingAllocator.cpp). What the history records comes from CachingAllocator.cpp's
// allocations and frees; bindings/MemorySnapshot.cpp turns a snapshot into torch.foo.memory._snapshot()'s
// dictionary.
#include "device/AllocatorHistory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>

#include "device/Common.h"
#include "device/DeviceCache.h"

namespace foo {
namespace {

using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

// What _record_memory_history asked for, the same on every device. Read without a lock: a stack is gathered
// before the allocator's lock is taken (gathering Python frames takes the GIL, which the caller may hold).
std::atomic<int> g_record_when{static_cast<int>(RecordContext::NEVER)};
std::atomic<CreateContextFn> g_context_recorder{nullptr};
std::atomic<bool> g_record_trace{false};

int64_t wallClockMicroseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

namespace allocator {

std::shared_ptr<c10::GatheredContext> gatherContext(RecordContext needed) {
  if (g_record_when.load(std::memory_order_relaxed) < static_cast<int>(needed)) return nullptr;
  const CreateContextFn recorder = g_context_recorder.load(std::memory_order_relaxed);
  return recorder != nullptr ? recorder() : nullptr;
}

bool recording(RecordContext level) { return g_record_when.load(std::memory_order_relaxed) >= static_cast<int>(level); }

bool historyEnabled() { return g_record_trace.load(std::memory_order_relaxed) || recording(RecordContext::STATE); }

// ---- The trace of one device

void TraceRing::append(TraceEntry::Action action, const void* addr, size_t size, fooStream_t stream,
                       std::shared_ptr<c10::GatheredContext> context) {
  if (!g_record_trace.load(std::memory_order_relaxed)) return;
  TraceEntry entry(action, device_, reinterpret_cast<size_t>(addr), size, reinterpret_cast<void*>(stream), {0, 0},
                   wallClockMicroseconds(), std::move(context));
  if (entries_.size() < max_entries_) {
    entries_.push_back(std::move(entry));
  } else {
    entries_[next_] = std::move(entry);
    next_ = (next_ + 1) % max_entries_;
  }
}

void TraceRing::resize(size_t max_entries, bool clear) {
  if (clear || max_entries != max_entries_) {
    std::vector<TraceEntry> kept = ordered();
    if (clear) kept.clear();
    if (kept.size() > max_entries) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(max_entries));
    entries_ = std::move(kept);
    next_ = 0;
  }
  max_entries_ = max_entries;
}

std::vector<TraceEntry> TraceRing::ordered() const {
  std::vector<TraceEntry> ordered(entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end());
  ordered.insert(ordered.end(), entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_));
  return ordered;
}

// ---- DeviceCache: history and snapshot

void DeviceCache::setHistory(size_t max_entries, bool clear) {
  std::lock_guard<std::mutex> lock(mutex_);
  trace_.resize(max_entries, clear);
}

void DeviceCache::snapshot(CachingAllocator::Snapshot& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  trace_.record(TraceEntry::SNAPSHOT, nullptr, 0, 0, nullptr);
  std::set<Block*> blocks;
  for (const auto& [ptr, block] : active_) blocks.insert(block);
  for (const auto& [event, block] : pending_) blocks.insert(block);
  for (const Pool* pool : {&small_pool_, &large_pool_}) blocks.insert(pool->begin(), pool->end());
  for (const auto& [id, pool] : private_pools_) {
    blocks.insert(pool->small.begin(), pool->small.end());
    blocks.insert(pool->large.begin(), pool->large.end());
  }
  std::vector<Block*> heads;
  for (Block* block : blocks)
    if (block->prev == nullptr) heads.push_back(block);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  for (Block* head : heads) {
    c10::CachingDeviceAllocator::SegmentInfo segment;
    segment.device = device_;
    segment.address = reinterpret_cast<size_t>(head->ptr);
    segment.stream = reinterpret_cast<void*>(head->stream);
    segment.is_large = !head->small;
    if (head->pool != nullptr) segment.owner_private_pool_id = head->pool->id;
    for (Block* block = head; block != nullptr; block = block->next) {
      c10::CachingDeviceAllocator::BlockInfo info;
      info.size = block->size;
      info.allocated = block->allocated;
      info.active = block->allocated || block->pending_events > 0;
      info.requested_size = info.active ? block->requested : 0;
      info.context_when_allocated = block->context;
      segment.total_size += block->size;
      if (info.allocated) segment.allocated_size += block->size;
      if (info.active) segment.active_size += block->size;
      segment.requested_size += info.requested_size;
      segment.blocks.push_back(std::move(info));
    }
    out.segments.push_back(std::move(segment));
  }
  out.device_traces.push_back(trace_.ordered());
}

}  // namespace allocator

// ---- CachingAllocator: history and snapshot

void CachingAllocator::recordHistory(bool trace, CreateContextFn recorder, RecordContext when, size_t max_entries,
                                     bool clear) {
  g_context_recorder.store(recorder, std::memory_order_relaxed);
  g_record_when.store(static_cast<int>(recorder != nullptr ? when : RecordContext::NEVER), std::memory_order_relaxed);
  g_record_trace.store(trace, std::memory_order_relaxed);
  // Turning the history off keeps what it recorded (for a snapshot after it), unless asked to clear.
  for (int d = 0; d < deviceCount(); ++d) {
    allocator::DeviceCache& cache = allocator::deviceCache(static_cast<c10::DeviceIndex>(d));
    if (trace) {
      cache.setHistory(max_entries, clear);
    } else if (clear) {
      cache.setHistory(0, true);
    }
  }
}

CachingAllocator::Snapshot CachingAllocator::snapshot() {
  Snapshot out;
  for (int d = 0; d < deviceCount(); ++d) allocator::deviceCache(static_cast<c10::DeviceIndex>(d)).snapshot(out);
  return out;
}

}  // namespace foo
