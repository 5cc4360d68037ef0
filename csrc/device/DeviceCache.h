// Private to the caching allocator: one device's cache, shared by its two translation units.
// CachingAllocator.cpp defines the core (block pools, malloc/free, stream-ordered reuse, record_stream,
// stats, the memory limit, graph pools); AllocatorHistory.cpp defines the history and the snapshot.
// Nothing else includes this header.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/flat_hash_map.h>

#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "device/AllocatorHistory.h"
#include "device/CachingAllocator.h"

namespace foo::allocator {

struct PrivatePool;

struct Block {
  size_t size;
  char* ptr;  // device address
  bool small;
  // As in CUDA's allocator, a segment and its blocks belong to the stream they were allocated on: a
  // block freed by the host is reused only by that stream, whose queued work is ordered before the new
  // user's. Other streams that used it (Tensor.record_stream) delay its reuse until their work is done.
  fooStream_t stream = 0;
  bool allocated = false;
  size_t requested = 0;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
  std::vector<fooStream_t> stream_uses;
  int pending_events = 0;
  bool counted_oversize = false;  // counted in oversize_allocations (the setting may change while it lives)
  PrivatePool* pool = nullptr;    // the graph memory pool its segment belongs to (nullptr: the shared pools)
  std::shared_ptr<c10::GatheredContext> context;  // the stack that allocated it, when history records stacks
  bool isSplit() const { return prev != nullptr || next != nullptr; }
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

// Cached free blocks, by stream, then size, then address.
using Pool = std::set<Block*, BlockLess>;

// A private memory pool (CUDA's): the pool of graphs, whose captures allocate from segments only they use (so
// memory a graph's replays write is never handed to other tensors), or a MemPool, which the allocations of a
// thread inside use_mem_pool come from.
struct PrivatePool {
  explicit PrivatePool(c10::MempoolId_t pool_id) : id(pool_id) {}
  c10::MempoolId_t id;
  Pool small, large;  // its cached free blocks
  // Its users (graphs, a MemPool, open use_mem_pool contexts: MemPool.use_count()); at 0 its free segments go
  // back to the device.
  int users = 0;
};

struct FreedBlock {
  size_t size;
  fooStream_t stream;
};

// One device's cache. Its public members take the device's lock; the private ones run under it.
class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device), trace_(device) {}

  // ---- Allocation (CachingAllocator.cpp)
  Block* malloc(size_t requested, fooStream_t stream);
  // Returns the freed block's size and stream (for the sanitizer).
  FreedBlock free(void* ptr);
  void recordStream(void* ptr, fooStream_t stream);
  // Queued work may still use cached blocks: the device finishes it before they are released.
  void emptyCache();

  // ---- Statistics and the memory limit (CachingAllocator.cpp)
  c10::CachingDeviceAllocator::DeviceStats stats();
  void resetAccumulated();
  void resetPeak();
  void setLimit(size_t limit);
  // Fault injection (torch.foo.faults.fail_allocation): after `allocations` more, the next allocation raises
  // torch.OutOfMemoryError, once; a negative count disarms it.
  void failAllocation(int64_t allocations);

  // ---- Private memory pools (CachingAllocator.cpp)
  // A MemPool: the pool, with one user.
  void createPool(c10::MempoolId_t id);
  // Until endAllocateToPool, the allocations of capture `capture_id` (or of the calling thread) come from the
  // pool (created on first use), which gains a user.
  void beginAllocateToPool(c10::MempoolId_t id, unsigned long long capture_id);
  void beginAllocateCurrentThreadToPool(c10::MempoolId_t id);
  void endAllocateToPool(c10::MempoolId_t id);
  int poolUseCount(c10::MempoolId_t id);
  bool checkPoolLiveAllocations(c10::MempoolId_t id, const std::unordered_set<void*>& expected);
  PoolCheckpoint checkpointPool(c10::MempoolId_t id);
  // Restores the pool to the checkpoint; `freed`: what it had allocated; `allocated`: the checkpoint's allocated blocks.
  void restorePool(const PoolCheckpoint& checkpoint, std::vector<void*>& freed, std::vector<Block*>& allocated);
  // A graph using the pool is gone. With the last one the pool becomes freeable, as CUDA's: its free
  // segments go back to the device when the cache is emptied (empty_cache, or the retry after a failed
  // allocation), after the device finished the work queued before (a replay may still use them).
  void releasePool(c10::MempoolId_t id);

  // ---- History and snapshot (AllocatorHistory.cpp)
  void setHistory(size_t max_entries, bool clear);
  // Appends this device's segments (a segment is a chain of blocks from one fooMalloc) and its history.
  void snapshot(CachingAllocator::Snapshot& out);

 private:
  using Context = std::shared_ptr<c10::GatheredContext>;

  // One request of malloc: its size rounded, and the pool it is served from.
  struct Request {
    size_t requested;
    size_t size;  // rounded
    bool small;
    fooStream_t stream;
    PrivatePool* private_pool;  // the capture's pool, or nullptr
    Pool* pool;                 // where its cached blocks are
  };

  // The steps of malloc, in order.
  Request roundAndPickPool(size_t requested, fooStream_t stream);
  Block* takeCachedOrNewSegment(const Request& request, const Context& context, std::unique_lock<std::mutex>& lock);
  Block* releaseCacheAndRetry(const Request& request, const Context& context, std::unique_lock<std::mutex>& lock);
  [[noreturn]] void raiseOutOfMemory(size_t requested, fooStream_t stream, const char* cause = nullptr);
  void splitIfWorthIt(Block* block, const Request& request);
  void splitAt(Block* block, size_t size, Pool& pool);
  void recordAllocation(Block* block, const Request& request, const Context& context);

  // Finding and making blocks.
  Block* takeCached(Pool& pool, size_t size, bool small, fooStream_t stream);
  Block* newSegment(size_t size, bool small, fooStream_t stream, const Context& context, PrivatePool* private_pool);
  Block* newBlock(size_t size, char* ptr, bool small, fooStream_t stream);
  Block* takeFromPool(Pool& pool, Pool::iterator it);
  void putInPool(Pool& pool, Block* block);
  Pool& poolFor(PrivatePool* private_pool, bool small);
  PrivatePool* routedPool(fooStream_t stream) const;
  PrivatePool& poolWithUser(c10::MempoolId_t id);

  // Freeing, caching and releasing blocks.
  void processEvents();
  void freeBlock(Block* block, Context context);
  PrivatePool& existingPool(c10::MempoolId_t id);
  std::vector<Block*> segmentHeads(const PrivatePool* pool) const;
  void completeFree(Block* block, Context context);
  void cacheBlock(Block* block);
  void collectGarbage(size_t incoming, std::unique_lock<std::mutex>& lock);
  void releaseCachedSegments();  // after the device finished its queued work
  void releaseWholeSegments(Pool& pool);
  void forgetIfUnused(PrivatePool* pool);
  bool usedBy(const PrivatePool* pool) const;

  // Accounting.
  size_t reserved() const { return static_cast<size_t>(stats_.reserved_bytes[0].current); }
  void reportToProfiler(void* ptr, int64_t delta) const;

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::vector<Block*> spare_blocks_;
  std::vector<Pool::node_type> spare_nodes_;
  ska::flat_hash_map<void*, Block*> active_;
  std::deque<std::pair<fooEvent_t, Block*>> pending_;  // freed blocks still used by other streams
  c10::CachingDeviceAllocator::DeviceStats stats_;
  size_t limit_ = std::numeric_limits<size_t>::max();
  int64_t allocations_before_failure_ = -1;  // failAllocation's countdown; disarmed while negative
  TraceRing trace_;  // this device's recent actions, when the history keeps them
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<std::pair<unsigned long long, PrivatePool*>> captures_;  // graphs being captured, by capture id
  std::vector<std::pair<std::thread::id, PrivatePool*>> threads_;      // threads inside use_mem_pool, innermost last
};

DeviceCache& deviceCache(c10::DeviceIndex device);

}  // namespace foo::allocator
