// The foo caching allocator: device memory for foo tensors, reused across allocations like
// c10/cuda's CUDACachingAllocator (block pools, splitting, per-device stats, a memory limit).
// CachingAllocator.cpp holds its core, AllocatorHistory.cpp the memory history and snapshots.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <unordered_set>
#include <vector>

#include "runtime/foo_runtime.h"

namespace foo {

// A private pool's segments and blocks at one moment (graph trees' checkpoint of a pool).
struct PoolCheckpoint {
  struct Block {
    void* ptr;
    size_t size;
    size_t requested;
    bool allocated;
  };
  c10::MempoolId_t id;
  std::vector<std::vector<Block>> segments;  // each segment's blocks, in address order
};

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  // ---- Allocation
  // Allocates on the current foo device (allocateOn: on `device`), for the current stream; the DataPtr
  // holds a device address.
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);
  // The owning DataPtr of a block this allocator handed out on `device` (whose owner gave it up).
  c10::DataPtr ownedDataPtr(void* ptr, c10::DeviceIndex device);
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // Tensor.record_stream: once freed, the block is reused only after the work queued on `stream` until
  // then is done.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  bool initialized() override;

  // ---- Statistics (torch.foo.memory_stats) and the device's memory
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;  // free and total bytes

  // ---- Settings: the cache and the memory limit
  // torch.foo.empty_cache: once queued work is done, the shared pools' cached free segments go back to
  // the device (graph pools keep theirs).
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  // torch.foo.set_per_process_memory_fraction: at most `fraction` of the device's memory is reserved.
  void setMemoryFraction(double fraction, c10::DeviceIndex device);
  // torch.foo.faults.fail_allocation: after `allocations` more on `device`, the next one raises
  // torch.OutOfMemoryError (once); negative: disarmed.
  void failAllocation(c10::DeviceIndex device, int64_t allocations);

  // ---- Private memory pools (CUDA's): graphs' and MemPools'
  // From beginAllocateToPool to endAllocateToPool, allocations on the streams recording into capture
  // `capture_id` (the capturing stream, and streams that joined it) come from the pool `id` (created on
  // first use; graphs that pass the same id share it), whose blocks serve only such allocations;
  // beginAllocateCurrentThreadToPool routes the calling thread's allocations on `device` (use_mem_pool).
  // createPool makes a MemPool's pool, with its one user; each begin adds a user, releasePool removes one
  // (at none, the pool's free segments go back to the device), poolUseCount counts them.
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id, unsigned long long capture_id);
  void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id);
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id);
  void createPool(c10::DeviceIndex device, c10::MempoolId_t id);
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id);
  int poolUseCount(c10::DeviceIndex device, c10::MempoolId_t id);

  // ---- What Inductor's graph trees ask of CUDA's allocator (torch.compile(mode="reduce-overhead"))
  // Whether the allocated blocks of pool `id` are exactly those at `expected` (_cuda_checkPoolLiveAllocations).
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id, const std::unordered_set<void*>& expected);
  // Whether `ptr` owns a block of this allocator (its deleter frees it: _has_Standard_Deleter).
  static bool ownsBlock(const c10::DataPtr& ptr);
  // Frees the block `ptr` owns now, leaving `ptr` pointing at it without owning it (_free_And_Remove_DeleterFn).
  void freeAndDisown(c10::DataPtr& ptr);
  // Whether the memory history records anything (_cuda_isHistoryEnabled).
  static bool historyEnabled();
  // The pool's state (_cuda_getCheckpointState), and its restoration (_cuda_setCheckpointPoolState): every block
  // the pool has allocated is freed (`freed` lists them), then the checkpoint's segments are laid out again and its
  // allocated blocks allocated (`allocated` owns them). The checkpoint's segments must still be the pool's.
  PoolCheckpoint checkpointPool(c10::DeviceIndex device, c10::MempoolId_t id);
  struct CheckpointDelta {
    std::vector<void*> freed;
    std::vector<c10::DataPtr> allocated;
  };
  CheckpointDelta restorePool(c10::DeviceIndex device, const PoolCheckpoint& checkpoint);

  // ---- Memory history and snapshots (AllocatorHistory.cpp)
  // As CUDA's allocator keeps it (torch.foo.memory._record_memory_history): `recorder` gathers the stack
  // of an allocation (and of a free, with RecordContext::ALL) when `when` asks for it; with `trace`, each
  // device keeps its last `max_entries` actions.
  void recordHistory(bool trace, c10::CachingDeviceAllocator::CreateContextFn recorder,
                     c10::CachingDeviceAllocator::RecordContext when, size_t max_entries, bool clear);
  struct Snapshot {
    std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;  // of every device
    std::vector<std::vector<c10::CachingDeviceAllocator::TraceEntry>> device_traces;  // per device, oldest first
  };
  // The segments and blocks of every device, and their recorded histories (entry times: microseconds
  // since the epoch). Records a "snapshot" action.
  Snapshot snapshot();
};

CachingAllocator& cachingAllocator();

// Grows (or shrinks) a foo storage, keeping its leading bytes.
void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace foo
