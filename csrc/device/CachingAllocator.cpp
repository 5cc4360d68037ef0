// The foo caching allocator's core (model: c10/cuda/CUDACachingAllocator.cpp): block pools, malloc and
// free, stream-ordered reuse, record_stream, statistics, the memory limit and graph pools. The memory
// history and snapshots are in AllocatorHistory.cpp; DeviceCache.h declares the per-device cache both use.
#include "device/CachingAllocator.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "device/Common.h"
#include "device/DeviceCache.h"
#include "device/IpcSharing.h"
#include "device/Launch.h"
#include "device/Sanitizer.h"

namespace foo {
namespace {

using c10::CachingAllocator::AcceleratorAllocatorConfig;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

constexpr size_t kMinBlockSize = 512;          // every allocation is rounded up to this
constexpr size_t kSmallSize = 1 << 20;         // requests up to 1 MiB come from the small pool
constexpr size_t kSmallSegment = 2 << 20;      // small-pool segments are 2 MiB
constexpr size_t kLargeSegment = 20 << 20;     // medium requests share 20 MiB segments
constexpr size_t kMinLargeAlloc = 10 << 20;    // requests from here get a segment of their own
constexpr size_t kLargeRounding = 2 << 20;

// The settings of PYTORCH_ALLOC_CONF (PyTorch's AcceleratorAllocatorConfig, shared by accelerators; also
// changed at run time by torch._C._accelerator_setAllocatorSettings): read at each use, as CUDA's allocator does.

// Rounds a request up to a multiple of kMinBlockSize, or, with roundup_power2_divisions, up to the next of
// that many equal divisions between two powers of two (fewer distinct sizes: less fragmentation).
size_t roundSize(size_t n) {
  if (n < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = AcceleratorAllocatorConfig::roundup_power2_divisions(n);
  if (divisions > 1 && n > kMinBlockSize * divisions && (n & (n - 1)) != 0) {
    size_t floor = size_t{1} << (63 - __builtin_clzll(n));  // the power of two below n
    size_t step = floor >> (63 - __builtin_clzll(divisions));
    if (step == 0) return floor << 1;
    const size_t rounded = n & ~(step - 1);
    return rounded == n ? n : rounded + step;
  }
  return (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

// Blocks of max_split_size or more are "oversize": never split, and reused only by requests at most
// max_non_split_rounding_size smaller.
bool oversize(size_t size) { return size >= AcceleratorAllocatorConfig::max_split_size(); }

size_t segmentSize(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// Every allocation counts in the aggregate and in its pool's statistics.
void updateStat(StatArray& stats, bool small, int64_t delta) {
  c10::CachingAllocator::Stat& all = stats[static_cast<size_t>(StatType::AGGREGATE)];
  c10::CachingAllocator::Stat& pool = stats[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)];
  if (delta >= 0) {
    all.increase(static_cast<size_t>(delta));
    pool.increase(static_cast<size_t>(delta));
  } else {
    all.decrease(static_cast<size_t>(-delta));
    pool.decrease(static_cast<size_t>(-delta));
  }
}

template <class F>
void forEachStatArray(DeviceStats& stats, F f) {
  for (StatArray* a : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                       &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                       &stats.inactive_split_bytes, &stats.requested_bytes})
    f(*a);
}

}  // namespace

namespace allocator {

// ---- malloc, step by step

Block* DeviceCache::malloc(size_t requested, fooStream_t stream) {
  if (C10_UNLIKELY(AcceleratorAllocatorConfig::use_expandable_segments())) {
    TORCH_WARN_ONCE("foo: expandable_segments is not supported (the foo runtime cannot grow a segment); "
                    "the allocator ignores it");
  }
  const Context context = gatherContext(RecordContext::STATE);
  std::unique_lock<std::mutex> lock(mutex_);
  // The host's allocations count, not a kernel's temporaries on a stream's worker.
  if (C10_UNLIKELY(allocations_before_failure_ >= 0) && !onStreamWorker() && allocations_before_failure_-- == 0) {
    raiseOutOfMemory(requested, stream, "torch.foo.faults.fail_allocation");
  }
  processEvents();
  const Request request = roundAndPickPool(requested, stream);
  Block* block = takeCachedOrNewSegment(request, context, lock);
  if (block == nullptr && !onStreamWorker()) block = releaseCacheAndRetry(request, context, lock);
  if (block == nullptr) raiseOutOfMemory(requested, stream);
  splitIfWorthIt(block, request);
  recordAllocation(block, request, context);
  return block;
}

// The request's size, rounded, and its pool: the pool of the graph `stream` captures into, if any, else
// the shared small or large pool.
DeviceCache::Request DeviceCache::roundAndPickPool(size_t requested, fooStream_t stream) {
  const size_t size = roundSize(requested);
  const bool small = size <= kSmallSize;
  PrivatePool* private_pool = routedPool(stream);
  return Request{requested, size, small, stream, private_pool, &poolFor(private_pool, small)};
}

// A cached block of the request's stream that fits, else a fresh segment, else nullptr.
Block* DeviceCache::takeCachedOrNewSegment(const Request& request, const Context& context,
                                           std::unique_lock<std::mutex>& lock) {
  Block* block = takeCached(*request.pool, request.size, request.small, request.stream);
  if (block != nullptr) return block;
  collectGarbage(segmentSize(request.size), lock);
  return newSegment(request.size, request.small, request.stream, context, request.private_pool);
}

// Gives cached segments back to the device and retries once, as CUDA's allocator does. Queued work may
// still use them, so the device finishes it first (without the lock: that work may allocate). A stream
// worker never gets here: it would wait for its own stream.
Block* DeviceCache::releaseCacheAndRetry(const Request& request, const Context& context,
                                         std::unique_lock<std::mutex>& lock) {
  stats_.num_alloc_retries += 1;
  lock.unlock();
  ipc::collect();  // blocks sent to other processes that no receiver holds any more (CUDA's ipc collect callback)
  FOO_CHECK(fooDeviceSynchronize(device_));
  lock.lock();
  processEvents();
  releaseCachedSegments();
  return takeCachedOrNewSegment(request, context, lock);
}

[[noreturn]] void DeviceCache::raiseOutOfMemory(size_t requested, fooStream_t stream, const char* cause) {
  stats_.num_ooms += 1;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  fooMemGetInfo(device_, &free_bytes, &total_bytes);
  trace_.record(TraceEntry::OOM, reinterpret_cast<void*>(free_bytes), requested, stream, nullptr);
  const size_t allocated = static_cast<size_t>(stats_.allocated_bytes[0].current);
  std::string limit_note;
  if (limit_ < total_bytes) limit_note = " The process is limited to " + mib(limit_) + " by set_per_process_memory_fraction.";
  if (cause != nullptr) limit_note += std::string(" This failure was injected by ") + cause + ".";
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(requested), allocated, reserved(), fooDevice(device_));
  TORCH_CHECK_WITH(
      OutOfMemoryError, false, "foo out of memory. Tried to allocate ", mib(requested), ". foo:", static_cast<int>(device_),
      " has a total capacity of ", mib(total_bytes), " of which ", mib(free_bytes), " is free. Of the allocated memory ",
      mib(allocated), " is allocated by PyTorch, and ", mib(reserved() - allocated),
      " is reserved by PyTorch but unallocated.", limit_note,
      " torch.foo.memory_summary() shows the allocator's statistics, and torch.foo.memory._record_memory_history()"
      " with torch.foo.memory._dump_snapshot() what allocated the memory.");
}

// The rest of `block` past the request becomes a free block of the same pool, when it is worth keeping:
// in the small pool, a rest of at least kMinBlockSize; in the large pool, a rest over kSmallSize, unless
// the request is oversize (oversize blocks are never split).
void DeviceCache::splitIfWorthIt(Block* block, const Request& request) {
  const size_t size = request.size;
  const bool small = request.small;
  const size_t remaining = block->size - size;
  if (!(small ? remaining >= kMinBlockSize : !oversize(size) && remaining > kSmallSize)) return;
  splitAt(block, size, *request.pool);
}

// Cuts `block` (taken out of its pool) after `size` bytes; the rest goes to `pool`.
void DeviceCache::splitAt(Block* block, size_t size, Pool& pool) {
  const size_t remaining = block->size - size;
  Block* rest = newBlock(remaining, block->ptr + size, block->small, block->stream);
  rest->pool = block->pool;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  putInPool(pool, rest);
  updateStat(stats_.inactive_split, block->small, 1);
  updateStat(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(remaining));
}

// The block is handed out: it becomes active, and the history, the statistics and the profiler see it.
void DeviceCache::recordAllocation(Block* block, const Request& request, const Context& context) {
  const bool small = request.small;
  block->allocated = true;
  block->requested = request.requested;
  block->context = context;
  trace_.record(TraceEntry::ALLOC, block->ptr, request.requested, request.stream,
                recording(RecordContext::ALLOC) ? context : nullptr);
  active_.emplace(block->ptr, block);
  updateStat(stats_.allocation, small, 1);
  updateStat(stats_.allocated_bytes, small, static_cast<int64_t>(block->size));
  updateStat(stats_.active, small, 1);
  updateStat(stats_.active_bytes, small, static_cast<int64_t>(block->size));
  updateStat(stats_.requested_bytes, small, static_cast<int64_t>(request.requested));
  block->counted_oversize = oversize(block->size);
  if (block->counted_oversize) stats_.oversize_allocations.increase(1);
  reportToProfiler(block->ptr, static_cast<int64_t>(block->size));
}

// ---- free and record_stream

FreedBlock DeviceCache::free(void* ptr) {
  Context context = gatherContext(RecordContext::ALL);
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = active_.find(ptr);
  TORCH_INTERNAL_ASSERT(found != active_.end(), "foo allocator: freeing an unknown pointer");
  Block* block = found->second;
  const FreedBlock freed{block->size, block->stream};
  freeBlock(block, std::move(context));
  return freed;
}

void DeviceCache::freeBlock(Block* block, Context context) {
  active_.erase(block->ptr);
  const bool small = block->small;
  updateStat(stats_.allocation, small, -1);
  updateStat(stats_.allocated_bytes, small, -static_cast<int64_t>(block->size));
  updateStat(stats_.active, small, -1);
  updateStat(stats_.active_bytes, small, -static_cast<int64_t>(block->size));
  updateStat(stats_.requested_bytes, small, -static_cast<int64_t>(block->requested));
  if (block->counted_oversize) stats_.oversize_allocations.decrease(1);
  reportToProfiler(block->ptr, -static_cast<int64_t>(block->size));
  block->allocated = false;
  block->context.reset();
  trace_.record(TraceEntry::FREE_REQUESTED, block->ptr, block->requested, block->stream, context);
  // A deleter must not throw: a marker that cannot be recorded (a forked child) just delays nothing.
  for (fooStream_t used_on : block->stream_uses) {
    fooEvent_t event = nullptr;
    if (fooEventCreate(&event, 0) != fooSuccess) continue;
    if (fooEventRecord(event, device_, used_on) != fooSuccess) {
      fooEventDestroy(event);
      continue;
    }
    pending_.emplace_back(event, block);
    block->pending_events += 1;
  }
  block->stream_uses.clear();
  if (block->pending_events == 0) completeFree(block, std::move(context));
}

void DeviceCache::recordStream(void* ptr, fooStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = active_.find(ptr);
  if (found == active_.end()) return;
  Block* block = found->second;
  if (stream == block->stream) return;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

// Caches the freed blocks whose users on other streams are done (events complete in stream order).
void DeviceCache::processEvents() {
  while (!pending_.empty()) {
    auto& [event, block] = pending_.front();
    if (fooEventQuery(event) != fooSuccess) break;
    fooEventDestroy(event);
    Block* done = block;
    pending_.pop_front();
    if (--done->pending_events == 0) completeFree(done, nullptr);
  }
}

// A freed block no other stream still uses goes back to the cache.
void DeviceCache::completeFree(Block* block, Context context) {
  trace_.record(TraceEntry::FREE_COMPLETED, block->ptr, block->requested, block->stream, std::move(context));
  cacheBlock(block);
}

// Returns a free block to its pool, merged with free neighbours of its segment.
void DeviceCache::cacheBlock(Block* block) {
  const bool small = block->small;
  Pool& pool = poolFor(block->pool, small);
  int64_t split_blocks = 0;
  int64_t split_bytes = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    // A neighbour freed while other streams may still use it is not in the pool yet.
    if (neighbour == nullptr || neighbour->allocated || neighbour->pending_events > 0) continue;
    takeFromPool(pool, pool.find(neighbour));
    split_blocks -= 1;
    split_bytes -= static_cast<int64_t>(neighbour->size);
    if (neighbour == block->prev) {
      block->ptr = neighbour->ptr;
      block->prev = neighbour->prev;
      if (block->prev) block->prev->next = block;
    } else {
      block->next = neighbour->next;
      if (block->next) block->next->prev = block;
    }
    block->size += neighbour->size;
    spare_blocks_.push_back(neighbour);
  }
  if (block->isSplit()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  updateStat(stats_.inactive_split, small, split_blocks);
  updateStat(stats_.inactive_split_bytes, small, split_bytes);
  putInPool(pool, block);
}

// ---- Blocks and pools

// Splitting and merging happen on every small allocation; recycling Block objects and the pools'
// tree nodes keeps the steady state free of heap traffic.
Block* DeviceCache::newBlock(size_t size, char* ptr, bool small, fooStream_t stream) {
  if (spare_blocks_.empty()) return new Block{size, ptr, small, stream};
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  *block = Block{size, ptr, small, stream};
  return block;
}

Block* DeviceCache::takeFromPool(Pool& pool, Pool::iterator it) {
  Pool::node_type node = pool.extract(it);
  Block* block = node.value();
  spare_nodes_.push_back(std::move(node));
  return block;
}

void DeviceCache::putInPool(Pool& pool, Block* block) {
  if (spare_nodes_.empty()) {
    pool.insert(block);
    return;
  }
  Pool::node_type node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.value() = block;
  pool.insert(std::move(node));
}

// A cached block of the stream's pool that fits, or nullptr.
Block* DeviceCache::takeCached(Pool& pool, size_t size, bool small, fooStream_t stream) {
  Block key{size, nullptr, small, stream};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  // An oversize block (which is never split) only serves a request of nearly its size.
  if (oversize((*it)->size) &&
      (!oversize(size) || (*it)->size >= size + AcceleratorAllocatorConfig::max_non_split_rounding_size())) {
    return nullptr;
  }
  Block* block = takeFromPool(pool, it);
  if (block->isSplit()) {
    updateStat(stats_.inactive_split, small, -1);
    updateStat(stats_.inactive_split_bytes, small, -static_cast<int64_t>(block->size));
  }
  return block;
}

// A fresh segment from the device, or nullptr when the device (or the memory limit) has no room.
Block* DeviceCache::newSegment(size_t size, bool small, fooStream_t stream, const Context& context,
                               PrivatePool* private_pool) {
  const size_t bytes = segmentSize(size);
  void* ptr = nullptr;
  const fooError_t error = reserved() + bytes <= limit_ ? fooMalloc(device_, &ptr, bytes) : fooErrorMemoryAllocation;
  if (error == fooErrorMemoryAllocation) return nullptr;
  FOO_CHECK(error);
  stats_.num_device_alloc += 1;
  updateStat(stats_.segment, small, 1);
  updateStat(stats_.reserved_bytes, small, static_cast<int64_t>(bytes));
  trace_.record(TraceEntry::SEGMENT_ALLOC, ptr, bytes, stream, recording(RecordContext::ALLOC) ? context : nullptr);
  if (oversize(bytes)) stats_.oversize_segments.increase(1);
  Block* block = newBlock(bytes, static_cast<char*>(ptr), small, stream);
  block->pool = private_pool;
  return block;
}

Pool& DeviceCache::poolFor(PrivatePool* private_pool, bool small) {
  if (private_pool != nullptr) return small ? private_pool->small : private_pool->large;
  return small ? small_pool_ : large_pool_;
}

// Where an allocation on `stream` comes from: the calling thread's pool inside use_mem_pool, else the pool of
// the capture `stream` records into (its own, or one it joined), if any.
PrivatePool* DeviceCache::routedPool(fooStream_t stream) const {
  if (!threads_.empty()) {
    const std::thread::id self = std::this_thread::get_id();
    for (auto it = threads_.rbegin(); it != threads_.rend(); ++it)
      if (it->first == self) return it->second;
  }
  if (captures_.empty()) return nullptr;
  unsigned long long capture_id = 0;
  if (fooStreamGetCaptureId(device_, stream, &capture_id) != fooSuccess || capture_id == 0) return nullptr;
  for (const auto& [capturing, pool] : captures_)
    if (capturing == capture_id) return pool;
  return nullptr;
}

// ---- Giving memory back to the device

void DeviceCache::emptyCache() {
  FOO_CHECK(fooDeviceSynchronize(device_));
  std::lock_guard<std::mutex> lock(mutex_);
  processEvents();
  releaseCachedSegments();
}

// garbage_collection_threshold, as CUDA's allocator applies it: under a memory fraction, a new segment that
// would take reserved memory past that share of the limit first gives the cached free segments back. Work
// queued before their blocks were freed may still use them: the device finishes it first (cudaFree waits for
// the device), without the lock, which that work may take. A stream worker cannot wait for its own stream:
// it collects nothing.
void DeviceCache::collectGarbage(size_t incoming, std::unique_lock<std::mutex>& lock) {
  const double threshold = AcceleratorAllocatorConfig::garbage_collection_threshold();
  if (threshold <= 0.0 || limit_ == std::numeric_limits<size_t>::max() || onStreamWorker()) return;
  if (static_cast<double>(reserved() + incoming) <= threshold * static_cast<double>(limit_)) return;
  lock.unlock();
  FOO_CHECK(fooDeviceSynchronize(device_));
  lock.lock();
  processEvents();
  releaseCachedSegments();
}

// The shared pools' whole free segments, and those of the private pools no graph or MemPool uses any more.
void DeviceCache::releaseCachedSegments() {
  for (auto* pool : {&small_pool_, &large_pool_}) releaseWholeSegments(*pool);
  std::vector<PrivatePool*> freeable;
  for (const auto& [id, pool] : private_pools_)
    if (pool->users == 0) freeable.push_back(pool.get());
  for (PrivatePool* pool : freeable) forgetIfUnused(pool);
}

// Frees the cached blocks of `pool` that are whole segments. A segment the runtime refuses to free is
// reported with a warning, and forgotten as if freed: the cache stays consistent.
void DeviceCache::releaseWholeSegments(Pool& pool) {
  for (auto it = pool.begin(); it != pool.end();) {
    Block* block = *it;
    if (block->isSplit()) {
      ++it;
      continue;
    }
    const fooError_t error = fooFree(device_, block->ptr);
    if (C10_UNLIKELY(error != fooSuccess)) {
      TORCH_WARN("foo allocator: freeing a cached segment of ", mib(block->size), " on foo:", static_cast<int>(device_),
                 " failed: ", fooGetErrorString(error));
    }
    trace_.record(TraceEntry::SEGMENT_FREE, block->ptr, block->size, block->stream, nullptr);
    if (oversize(block->size) && stats_.oversize_segments.current > 0) stats_.oversize_segments.decrease(1);
    stats_.num_device_free += 1;
    updateStat(stats_.segment, block->small, -1);
    updateStat(stats_.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
    it = pool.erase(it);
    spare_blocks_.push_back(block);
  }
}

// ---- Statistics and the memory limit

DeviceStats DeviceCache::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceStats stats = stats_;
  stats.max_split_size = static_cast<int64_t>(AcceleratorAllocatorConfig::max_split_size());
  return stats;
}

void DeviceCache::resetAccumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  forEachStatArray(stats_, [](StatArray& a) { for (auto& s : a) s.reset_accumulated(); });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
  stats_.oversize_allocations.reset_accumulated();
  stats_.oversize_segments.reset_accumulated();
}

void DeviceCache::resetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  forEachStatArray(stats_, [](StatArray& a) { for (auto& s : a) s.reset_peak(); });
  stats_.oversize_allocations.reset_peak();
  stats_.oversize_segments.reset_peak();
}

void DeviceCache::setLimit(size_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = limit;
}

void DeviceCache::failAllocation(int64_t allocations) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_before_failure_ = allocations;
}

// What torch.profiler(profile_memory=True) records of each allocation and free, as CUDA's allocator reports.
void DeviceCache::reportToProfiler(void* ptr, int64_t delta) const {
  c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<size_t>(stats_.allocated_bytes[0].current), reserved(),
                                   fooDevice(device_));
}

// ---- Private memory pools (graphs', MemPools')

PrivatePool& DeviceCache::poolWithUser(c10::MempoolId_t id) {
  std::unique_ptr<PrivatePool>& pool = private_pools_[id];
  if (!pool) pool = std::make_unique<PrivatePool>(id);
  pool->users += 1;
  return *pool;
}

void DeviceCache::createPool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  poolWithUser(id);
}

void DeviceCache::beginAllocateToPool(c10::MempoolId_t id, unsigned long long capture_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  captures_.emplace_back(capture_id, &poolWithUser(id));
}

void DeviceCache::beginAllocateCurrentThreadToPool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  threads_.emplace_back(std::this_thread::get_id(), &poolWithUser(id));
}

// Captures into the pool end; the calling thread's innermost use_mem_pool of it ends (others' go on).
void DeviceCache::endAllocateToPool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  captures_.erase(std::remove_if(captures_.begin(), captures_.end(),
                                 [&](const auto& capture) { return capture.second->id == id; }),
                  captures_.end());
  const std::thread::id self = std::this_thread::get_id();
  for (auto it = threads_.rbegin(); it != threads_.rend(); ++it) {
    if (it->first == self && it->second->id == id) {
      threads_.erase(std::next(it).base());
      break;
    }
  }
}

PrivatePool& DeviceCache::existingPool(c10::MempoolId_t id) {
  auto found = private_pools_.find(id);
  TORCH_CHECK(found != private_pools_.end(), "foo: no memory pool (", id.first, ", ", id.second, ") on foo:",
              static_cast<int>(device_));
  return *found->second;
}

bool DeviceCache::checkPoolLiveAllocations(c10::MempoolId_t id, const std::unordered_set<void*>& expected) {
  std::lock_guard<std::mutex> lock(mutex_);
  const PrivatePool& pool = existingPool(id);
  size_t live = 0;
  for (const auto& [ptr, block] : active_) {
    if (block->pool != &pool) continue;
    if (expected.count(ptr) == 0) return false;
    ++live;
  }
  return live == expected.size();
}

// The first blocks of the pool's segments, in address order.
std::vector<Block*> DeviceCache::segmentHeads(const PrivatePool* pool) const {
  std::vector<Block*> heads;
  const auto add = [&](Block* block) {
    if (block->pool == pool && block->prev == nullptr) heads.push_back(block);
  };
  for (const auto& [ptr, block] : active_) add(block);
  for (const auto& [event, block] : pending_) add(block);
  for (Block* block : pool->small) add(block);
  for (Block* block : pool->large) add(block);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

PoolCheckpoint DeviceCache::checkpointPool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolCheckpoint checkpoint{id, {}};
  for (const Block* block : segmentHeads(&existingPool(id))) {
    auto& segment = checkpoint.segments.emplace_back();
    for (; block != nullptr; block = block->next) {
      segment.push_back({block->ptr, block->size, block->requested, block->allocated});
    }
  }
  return checkpoint;
}

// As CUDA's: frees all the pool's allocated blocks (their segments merge back whole), then allocates every block of
// each checkpointed segment, in order, cutting the segment as the checkpoint did, and frees those it had free.
void DeviceCache::restorePool(const PoolCheckpoint& checkpoint, std::vector<void*>& freed, std::vector<Block*>& allocated) {
  std::lock_guard<std::mutex> lock(mutex_);
  PrivatePool& pool = existingPool(checkpoint.id);
  processEvents();
  std::vector<Block*> live;
  for (const auto& [ptr, block] : active_)
    if (block->pool == &pool) live.push_back(block);
  for (Block* block : live) {
    freed.push_back(block->ptr);
    block->stream_uses.clear();  // the graph tree's streams are ordered by its replays
    freeBlock(block, nullptr);
  }
  std::unordered_map<void*, Block*> free_at;  // every block of the pool is free now
  for (Pool* free_blocks : {&pool.small, &pool.large}) {
    for (Block* block : *free_blocks) free_at.emplace(block->ptr, block);
  }
  for (const auto& segment : checkpoint.segments) {
    auto found = free_at.find(segment.front().ptr);
    Block* block = found == free_at.end() ? nullptr : found->second;
    TORCH_CHECK(block != nullptr && block->prev == nullptr, "foo: a checkpointed segment of the pool at ",
                segment.front().ptr, " is no longer whole and free");
    std::vector<Block*> blocks;
    for (size_t i = 0; i < segment.size(); ++i) {
      const PoolCheckpoint::Block& state = segment[i];
      Pool& free_blocks = poolFor(&pool, block->small);
      takeFromPool(free_blocks, free_blocks.find(block));
      if (block->size > state.size) splitAt(block, state.size, free_blocks);
      TORCH_CHECK(block->ptr == state.ptr && block->size == state.size, "foo: the pool's segment at ",
                  segment.front().ptr, " does not match its checkpoint");
      recordAllocation(block, Request{state.requested, state.size, block->small, block->stream, &pool, &free_blocks},
                       nullptr);
      blocks.push_back(block);
      block = block->next;
    }
    for (size_t i = 0; i < segment.size(); ++i) {
      if (segment[i].allocated) {
        allocated.push_back(blocks[i]);
      } else {
        freeBlock(blocks[i], nullptr);
      }
    }
  }
}

int DeviceCache::poolUseCount(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = private_pools_.find(id);
  return found == private_pools_.end() ? 0 : found->second->users;
}

void DeviceCache::releasePool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = private_pools_.find(id);
  if (found != private_pools_.end()) found->second->users -= 1;
}

// A pool no graph uses any more: its whole free segments go back to the device, and it goes once empty.
void DeviceCache::forgetIfUnused(PrivatePool* pool) {
  releaseWholeSegments(pool->small);
  releaseWholeSegments(pool->large);
  if (pool->small.empty() && pool->large.empty() && !usedBy(pool)) private_pools_.erase(pool->id);
}

bool DeviceCache::usedBy(const PrivatePool* pool) const {
  for (const auto& [ptr, block] : active_)
    if (block->pool == pool) return true;
  for (const auto& [event, block] : pending_)
    if (block->pool == pool) return true;
  return false;
}

DeviceCache& deviceCache(c10::DeviceIndex device) {
  static const auto caches = perDevice([](c10::DeviceIndex d) { return std::make_unique<DeviceCache>(d); });
  return *caches[static_cast<size_t>(device)];
}

}  // namespace allocator

namespace {

using allocator::deviceCache;
using allocator::FreedBlock;

void freeOn(c10::DeviceIndex device, void* ptr) {
  const FreedBlock freed = deviceCache(device).free(ptr);
  if (C10_UNLIKELY(sanitizer::enabled())) sanitizer::freed(device, freed.stream, ptr, freed.size);
}

void freeDeviceAddress(void* ptr) { freeOn(static_cast<c10::DeviceIndex>(fooPointerGetDevice(ptr)), ptr); }

// The deleter of device DataPtrs, one per device: freeing needs no address-to-device lookup.
template <c10::DeviceIndex Device>
void freeOnDevice(void* ptr) {
  freeOn(Device, ptr);
}

template <size_t... Devices>
constexpr std::array<c10::DeleterFnPtr, sizeof...(Devices)> makeDeviceDeleters(std::index_sequence<Devices...>) {
  return {&freeOnDevice<static_cast<c10::DeviceIndex>(Devices)>...};
}

constexpr auto kDeviceDeleters = makeDeviceDeleters(std::make_index_sequence<FOO_MAX_DEVICES>());

constexpr const char* kDeviceCopy = "Memcpy DtoD (Device -> Device)";  // its name in a profile, as CUDA's

// Under the sanitizer, a block handed out is filled with 0xFF bytes (NaN in floating dtypes, -1 in signed
// integers) on its stream, after the work that used it before: what reads it before writing it sees poison,
// not a plausible stale value.
void poison(c10::DeviceIndex device, void* ptr, size_t bytes) {
  void* kernel = fooKernelAddress(ptr);
  if (runningAfterStream()) {  // a kernel's own allocation: the stream is idle and the kernel runs now
    std::memset(kernel, 0xFF, bytes);
    return;
  }
  int capturing = 0;
  fooStreamIsCapturing(device, currentStream(device), &capturing);
  if (onStreamWorker() || capturing) return;  // a graph's memory is its own: replays need no fill
  const auto fill = [kernel, bytes] { std::memset(kernel, 0xFF, bytes); };
  QueuedWork::enqueueBehindErrors(std::make_unique<QueuedKernel<decltype(fill)>>(fill), device, "sanitizer: poison");
}

}  // namespace

// ---- CachingAllocator: allocation

c10::DataPtr CachingAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where = fooDevice(device);
  if (nbytes == 0) return c10::DataPtr(nullptr, where);
  // Cached blocks need no runtime call, but in a forked child they are the parent's memory.
  if (C10_UNLIKELY(fooIsInBadFork())) FOO_CHECK(fooErrorForkedProcess);
  checkDeviceNotLost(device);
  const fooStream_t stream = currentStream(device);
  const allocator::Block* block = deviceCache(device).malloc(nbytes, stream);
  c10::DataPtr owned = ownedDataPtr(block->ptr, device);
  if (C10_UNLIKELY(sanitizer::enabled())) {
    sanitizer::allocated(device, stream, block->ptr, block->size);
    poison(device, block->ptr, block->size);
  }
  return owned;
}

c10::DataPtr CachingAllocator::allocate(size_t nbytes) { return allocateOn(currentDevice(), nbytes); }

c10::DataPtr CachingAllocator::ownedDataPtr(void* ptr, c10::DeviceIndex device) {
  return c10::DataPtr(ptr, ptr, kDeviceDeleters[static_cast<size_t>(device)], fooDevice(device));
}

c10::DeleterFnPtr CachingAllocator::raw_deleter() const { return &freeDeviceAddress; }

void CachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  void* kernel_dest = fooKernelAddress(dest);
  const void* kernel_src = fooKernelAddress(src);
  const auto device = static_cast<c10::DeviceIndex>(fooPointerGetDevice(dest));
  if (sanitizer::enabled()) {
    sanitizer::LaunchAccesses accesses;
    accesses.bytes(src, count, /*written=*/false);
    accesses.bytes(dest, count, /*written=*/true);
    accesses.check(device, kDeviceCopy);
  }
  runAfterStream(device, kDeviceCopy, [&] { std::memcpy(kernel_dest, kernel_src, count); }, fooActivityKindMemcpy);
}

void CachingAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.device().type() != c10::DeviceType::PrivateUse1) return;
  deviceCache(ptr.device().index()).recordStream(ptr.get(), FooStream::of(stream).id);
}

bool CachingAllocator::initialized() { return fooIsInitialized() != 0; }

// ---- CachingAllocator: statistics and device memory

c10::CachingDeviceAllocator::DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  return deviceCache(device).stats();
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  deviceCache(device).resetAccumulated();
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  deviceCache(device).resetPeak();
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  FOO_CHECK(fooMemGetInfo(device, &free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

// ---- CachingAllocator: settings

void CachingAllocator::emptyCache(c10::MempoolId_t) {
  if (!initialized()) return;
  for (int d = 0; d < deviceCount(); ++d) deviceCache(static_cast<c10::DeviceIndex>(d)).emptyCache();
}

void CachingAllocator::failAllocation(c10::DeviceIndex device, int64_t allocations) {
  checkDeviceIndex(device);
  deviceCache(device).failAllocation(allocations);
}

void CachingAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  checkDeviceIndex(device);
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
  deviceCache(device).setLimit(static_cast<size_t>(fraction * static_cast<double>(getMemoryInfo(device).second)));
}

// ---- CachingAllocator: private memory pools

void CachingAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                                           unsigned long long capture_id) {
  deviceCache(device).beginAllocateToPool(id, capture_id);
}

void CachingAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  deviceCache(device).endAllocateToPool(id);
}

void CachingAllocator::beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  deviceCache(device).beginAllocateCurrentThreadToPool(id);
}

void CachingAllocator::createPool(c10::DeviceIndex device, c10::MempoolId_t id) { deviceCache(device).createPool(id); }

void CachingAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t id) { deviceCache(device).releasePool(id); }

int CachingAllocator::poolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) {
  return deviceCache(device).poolUseCount(id);
}

// ---- CachingAllocator: for graph trees

bool CachingAllocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                                const std::unordered_set<void*>& expected) {
  return deviceCache(device).checkPoolLiveAllocations(id, expected);
}

bool CachingAllocator::ownsBlock(const c10::DataPtr& ptr) {
  const c10::DeviceIndex device = ptr.device().index();
  return ptr.device().type() == c10::DeviceType::PrivateUse1 && device >= 0 && device < FOO_MAX_DEVICES &&
         ptr.get_deleter() == kDeviceDeleters[static_cast<size_t>(device)];
}

void CachingAllocator::freeAndDisown(c10::DataPtr& ptr) {
  TORCH_CHECK(ownsBlock(ptr), "foo: expected a storage whose memory the caching allocator owns");
  const c10::DeviceIndex device = ptr.device().index();
  TORCH_CHECK(ptr.compare_exchange_deleter(kDeviceDeleters[static_cast<size_t>(device)], c10::detail::deleteNothing),
              "foo: the storage's memory changed owner meanwhile");
  freeOn(device, ptr.get());
}

bool CachingAllocator::historyEnabled() { return allocator::historyEnabled(); }

PoolCheckpoint CachingAllocator::checkpointPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  return deviceCache(device).checkpointPool(id);
}

CachingAllocator::CheckpointDelta CachingAllocator::restorePool(c10::DeviceIndex device,
                                                                const PoolCheckpoint& checkpoint) {
  CheckpointDelta delta;
  std::vector<allocator::Block*> allocated;
  deviceCache(device).restorePool(checkpoint, delta.freed, allocated);
  for (const allocator::Block* block : allocated) delta.allocated.push_back(ownedDataPtr(block->ptr, device));
  return delta;
}

// ---- The allocator, and storage resizing

CachingAllocator& cachingAllocator() {
  static CachingAllocator allocator;
  return allocator;
}

void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceIndex device = storage->device().index();
  const size_t keep = std::min(nbytes, storage->nbytes());
  // The copy reads the kept bytes (checked before anything changes) and writes the new block (recorded once
  // it exists), one launch under one description.
  sanitizer::LaunchAccesses copy;
  if (sanitizer::enabled()) {
    copy.bytes(storage->data(), keep, /*written=*/false);
    copy.check(device, kDeviceCopy);
  }
  auto old = std::make_shared<c10::DataPtr>(storage->set_data_ptr(cachingAllocator().allocateOn(device, nbytes)));
  storage->set_nbytes(nbytes);
  if (keep == 0) return;
  if (sanitizer::enabled()) {
    copy.bytes(storage->data(), keep, /*written=*/true);
    copy.record(device, kDeviceCopy);
  }
  // Queued on the current stream, as CUDA's resize copies with cudaMemcpyAsync; the copy holds the old
  // block until it ran.
  void* to = fooKernelAddress(storage->data_ptr().get());
  const void* from = fooKernelAddress(old->get());
  enqueueOnStream(device, kDeviceCopy, [to, from, keep, old] { std::memcpy(to, from, keep); }, fooActivityKindMemcpy);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &cachingAllocator());

}  // namespace foo
