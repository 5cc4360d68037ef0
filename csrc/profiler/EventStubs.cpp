// The profiler's device-event stubs for PrivateUse1 (what CUDA's are for CUDA): torch.autograd.profiler
// with use_device="foo" times each operator on the device with a pair of foo events on the current
// stream, as it does with CUDA events.
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "device/Common.h"
#include "device/Launch.h"
#include "profiler/Profiler.h"

namespace foo {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct FooEventStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex current = currentDevice();
    if (device != nullptr) *device = current;
    fooEvent_t raw = nullptr;
    FOO_CHECK(fooEventCreate(&raw, /*enable_timing=*/1));
    *event = std::shared_ptr<void>(raw, [](void* e) { fooEventDestroy(static_cast<fooEvent_t>(e)); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    FOO_CHECK(fooEventRecord(raw, current, currentStream(current)));
  }

  // Microseconds between the two events, as CUDA's stubs return.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    auto* first = static_cast<fooEvent_t>(start->get());
    auto* second = static_cast<fooEvent_t>(end->get());
    FOO_CHECK(fooEventSynchronize(first));
    FOO_CHECK(fooEventSynchronize(second));
    float ms = 0;
    FOO_CHECK(fooEventElapsedTime(&ms, first, second));
    return ms * 1000.0f;
  }

  // CUDA's stubs send marks and ranges to NVTX, for an external tool; foo has no such tool.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  void onEachDevice(std::function<void(int)> op) const override {
    c10::OptionalDeviceGuard guard;
    for (int index = 0; index < deviceCount(); ++index) {
      guard.reset_device(fooDevice(static_cast<c10::DeviceIndex>(index)));
      op(index);
    }
  }

  void synchronize() const override {
    for (int index = 0; index < deviceCount(); ++index) synchronizeDevice(static_cast<c10::DeviceIndex>(index));
  }

  bool enabled() const override { return true; }
};

}  // namespace

void registerProfilerEventStubs() {
  static FooEventStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

}  // namespace foo
