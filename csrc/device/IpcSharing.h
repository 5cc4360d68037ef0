// Sharing foo storages and events with other processes, as PyTorch shares CUDA's (torch/csrc/StorageSharing.cpp,
// CudaIPCTypes.cpp), in the shape of PyTorch's device-generic IPC hooks (RFC 192099: a storage's
// `_share_device_`, `_new_shared_device`, `_release_ipc_counter_device`). foo_backend/_multiprocessing.py
// wires them into torch.multiprocessing.
//
// The protocol, CUDA's: the sender sends the runtime's handle of the allocation holding the storage, the
// storage's offset in it, an interprocess event recorded on its current stream (the receiver's current stream
// waits on it, so the sender's queued writes come first) and a reference counter in shared memory, set to 1 for
// the receiver. From then on the sender's storage holds its memory through a sent-data context: when the sender
// lets go of the storage while a receiver still holds it, the block waits in limbo, out of the caching
// allocator's reach, until the counter drops to 0 (looked at each later such free, at torch.foo.ipc_collect() and
// when an allocation fails). The receiver maps the allocation; when its storage dies it waits for its current
// stream (as CUDA), unmaps and decrements the counter.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>
#include <string>

namespace foo::ipc {

// What a storage's sharing sends (the tuple of CUDA's _share_cuda_). An empty storage has an empty handle.
struct SharedStorage {
  c10::DeviceIndex device = 0;
  std::string handle;           // the runtime's handle of the allocation
  size_t bytes = 0;             // the storage's size
  size_t offset = 0;            // its offset in the allocation
  std::string counter_handle;   // the reference counter: its file
  int64_t counter_offset = 0;   // and its slot
  std::string event_handle;     // an interprocess event to wait on, when event_sync_required
  bool event_sync_required = false;
};

SharedStorage shareStorage(c10::StorageImpl& storage);
// A storage over the memory another process shared.
c10::intrusive_ptr<c10::StorageImpl> newSharedStorage(const SharedStorage& shared);
// Gives back a counter this process will not hold (the storage was received already).
void releaseCounter(const std::string& counter_handle, int64_t counter_offset);
// At exit, once this process's work is done: gives back the counters of the memory it still holds (Python's
// shutdown does not free every object, and the senders would keep that memory, and warn, until they exit).
void releaseReceivedAtExit();
// Frees the sent blocks no receiver holds any longer; true when some were freed (torch.foo.ipc_collect).
bool collect();

// torch.foo.Event(interprocess=True), its ipc_handle() and Event.from_ipc_handle().
void createInterprocessEvent(c10::Event& event, c10::DeviceIndex device);
std::string eventHandle(const c10::Event& event);
void openEventHandle(c10::Event& event, c10::DeviceIndex device, const std::string& handle);

}  // namespace foo::ipc
