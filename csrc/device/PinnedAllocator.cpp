// foo's pinned host memory: PyTorch's caching host allocator (ATen/core/CachingHostAllocator.h) over
// the runtime's page-locked memory. A block handed to an asynchronous copy is recorded on the copy's
// stream; once freed, it is reused only after an event recorded on that stream has completed.
#include <ATen/core/CachingHostAllocator.h>

#include <utility>

#include "device/Common.h"
#include "device/PinnedAllocator.h"
#include "device/Stream.h"

namespace foo {
namespace {

// Owns one runtime event; movable, as the allocator keeps events in containers.
class OwnedEvent {
 public:
  OwnedEvent() { FOO_CHECK(fooEventCreate(&event_, /*enable_timing=*/0)); }
  OwnedEvent(OwnedEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  OwnedEvent& operator=(OwnedEvent&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~OwnedEvent() {
    if (event_ != nullptr) fooEventDestroy(event_);
  }
  fooEvent_t get() const { return event_; }

 private:
  fooEvent_t event_ = nullptr;
};

struct PinnedAllocatorImpl final : public at::CachingHostAllocatorImpl<c10::Stream, OwnedEvent> {
 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    TORCH_CHECK_WITH(OutOfMemoryError, fooHostAlloc(ptr, size) == fooSuccess, "foo: failed to allocate ", size,
                     " bytes of pinned host memory");
  }
  void free_block(at::HostBlock<c10::Stream>* block) override { FOO_CHECK(fooFreeHost(block->ptr_)); }
  void record_stream(std::optional<std::vector<OwnedEvent>>& events, c10::Stream stream) override {
    OwnedEvent event;
    const FooStream foo_stream = FooStream::of(stream);
    FOO_CHECK(fooEventRecord(event.get(), foo_stream.device, foo_stream.id));
    events->push_back(std::move(event));
  }
  bool query_event(OwnedEvent& event) override { return fooEventQuery(event.get()) == fooSuccess; }
  c10::Stream get_current_stream() const override {
    const c10::DeviceIndex device = currentDevice();
    return FooStream::current(device).unwrap();
  }
  // CachingHostAllocatorImpl asks only while pinned memory is being allocated to a graph's private pool
  // (after begin_allocate_to_pool). foo's graph capture (graphs/FooGraph.cpp) gives private pools to
  // device memory only, never to pinned memory, so this is never asked.
  bool stream_is_capturing(c10::Stream) const override { return false; }
};

DECLARE_HOST_ALLOCATOR(PinnedAllocator, PinnedAllocatorImpl, freePinned, g_pinned_allocator)
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned_allocator)

}  // namespace

c10::Allocator* pinnedAllocator() { return &g_pinned_allocator; }

bool isPinned(const void* ptr) { return fooHostPointerIsPinned(ptr) != 0; }

void recordPinnedUse(const c10::DataPtr& data, c10::Stream stream) {
  g_pinned_allocator.record_event(data.get(), data.get_context(), stream);
}

}  // namespace foo
