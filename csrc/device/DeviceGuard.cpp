// The DeviceGuardImpl for foo: how PyTorch's generic code (DeviceGuard, streams, events, the autograd
// engine's device threads) talks to the foo runtime.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <utility>

#include "device/CachingAllocator.h"
#include "device/Common.h"
#include "device/Launch.h"

namespace foo {
namespace {

// A device without an index ("foo") means the current device, as in CUDA's stream functions.
c10::DeviceIndex indexOf(c10::Device d) { return d.has_index() ? d.index() : currentDevice(); }

thread_local fooEvent_t t_adopted_event = nullptr;

struct FooGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device previous = getDevice();
    if (d.index() != previous.index()) setDevice(d);
    return previous;
  }

  c10::Device getDevice() const override { return fooDevice(currentDevice()); }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kType);
    checkDeviceIndex(d.index());
    FOO_CHECK(fooSetDevice(d.index()));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override { fooSetDevice(d.index()); }

  c10::Stream getStream(c10::Device d) const override {
    const c10::DeviceIndex index = indexOf(d);
    checkDeviceIndex(index);
    return FooStream::current(index).unwrap();
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    const c10::DeviceIndex index = indexOf(d);
    checkDeviceIndex(index);
    return FooStream{index, 0}.unwrap();
  }

  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    const c10::DeviceIndex index = indexOf(d);
    checkDeviceIndex(index);
    fooStream_t stream = 0;
    FOO_CHECK(fooStreamCreate(index, &stream, priority));
    return FooStream{index, stream}.unwrap();
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    return getNewStream(d, isHighPriority ? -1 : 0);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    const FooStream stream = FooStream::of(s);
    checkDeviceIndex(stream.device);
    int priority = 0;
    TORCH_CHECK(fooStreamGetPriority(stream.device, stream.id, &priority) == fooSuccess,
                "Invalid stream ", s.id(), " for foo:", static_cast<int>(stream.device));
    const c10::Stream previous = getStream(s.device());
    setCurrentStream(stream.device, stream.id);
    return previous;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(foo::deviceCount()); }

  // foo allocates every dtype CPU does, except the quantized ones (not supported yet).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    checkDeviceIndex(indexOf(d));
    c10::DeviceCapability capability;
    for (c10::ScalarTypeIndex quantized : {c10::kIndex_QInt8, c10::kIndex_QUInt8, c10::kIndex_QInt32,
                                           c10::kIndex_QUInt4x2, c10::kIndex_QUInt2x4}) {
      capability.capability_data.capability_bits &= ~(uint64_t{1} << quantized);
    }
    return capability;
  }

  // Streams that autograd and futures report as users of a tensor reach the caching allocator.
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    cachingAllocator().recordStream(data_ptr, stream);
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr && t_adopted_event != nullptr) {  // adoptEvent: takes the event, records nothing
      *event = std::exchange(t_adopted_event, nullptr);
      return;
    }
    if (*event == nullptr) {
      fooEvent_t created = nullptr;
      FOO_CHECK(fooEventCreate(&created, flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0));
      *event = created;
    }
    const FooStream recording = FooStream::of(stream);
    FOO_CHECK(fooEventRecord(static_cast<fooEvent_t>(*event), recording.device, recording.id));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    const FooStream waiting = FooStream::of(stream);
    FOO_CHECK(fooStreamWaitEvent(waiting.device, waiting.id, static_cast<fooEvent_t>(event)));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const fooError_t state = fooEventQuery(static_cast<fooEvent_t>(event));
    if (state == fooErrorNotReady) return false;
    FOO_CHECK(state);  // recorded in a capture still underway
    return true;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) fooEventDestroy(static_cast<fooEvent_t>(event));
  }

  bool queryStream(const c10::Stream& stream) const override {
    const FooStream queried = FooStream::of(stream);
    const fooError_t state = fooStreamQuery(queried.device, queried.id);
    if (state == fooErrorNotReady) return false;
    FOO_CHECK(state);
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    const FooStream waited = FooStream::of(stream);
    foo::synchronizeStream(waited.device, waited.id);
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) FOO_CHECK(fooEventSynchronize(static_cast<fooEvent_t>(event)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    checkDeviceIndex(device_index);
    foo::synchronizeDevice(device_index);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    const fooError_t error = fooEventElapsedTime(&ms, static_cast<fooEvent_t>(start), static_cast<fooEvent_t>(end));
    TORCH_CHECK(error != fooErrorInvalidValue, "Both events must be created with enable_timing=True to measure elapsed time.");
    FOO_CHECK(error);
    return ms;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FooGuardImpl);

}  // namespace
// c10::Event takes no backend event from outside: its first record() creates one through the guard, which
// takes the adopted event instead (and records nothing) when there is one.
void adoptEvent(c10::Event& event, fooEvent_t adopted, c10::DeviceIndex device) {
  TORCH_INTERNAL_ASSERT(event.eventId() == nullptr, "adoptEvent: the event already has a foo event");
  t_adopted_event = adopted;
  event.record(FooStream::current(device).unwrap());
  TORCH_INTERNAL_ASSERT(t_adopted_event == nullptr);
}

}  // namespace foo
