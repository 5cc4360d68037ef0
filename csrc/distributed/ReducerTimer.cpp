// DDP's runtime statistics on foo (DistributedDataParallel._get_ddp_logging_data: forward, backward
// compute and communication times), measured as c10d's CUDA timer does: an event on the current stream
// at each point of the iteration, the differences in device time.
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace foo {
namespace {

class FooTimer : public c10d::Timer {
 public:
  explicit FooTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    Timer::record(event);  // the host time too, as c10d's other timers keep it
    const c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
    deviceEvent(event).record(guard.getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& from = deviceEvent(start);
    c10::Event& to = deviceEvent(end);
    // Not recorded in this iteration (e.g. no communication: no_sync, or one process).
    if (!from.was_marked_for_recording() || !to.was_marked_for_recording()) return std::nullopt;
    from.synchronize();
    to.synchronize();
    const double milliseconds = from.elapsedTime(to);
    // A comm hook can end the communication before the backward pass does: no meaningful duration.
    if (milliseconds < 0) return std::nullopt;
    return static_cast<int64_t>(milliseconds * 1e6);
  }

 private:
  c10::Event& deviceEvent(Event event) {
    switch (event) {
      case Event::kForwardStart: return forward_start_;
      case Event::kBackwardComputeStart: return backward_compute_start_;
      case Event::kBackwardComputeEnd: return backward_compute_end_;
      case Event::kBackwardCommStart: return backward_comm_start_;
      case Event::kBackwardCommEnd: return backward_comm_end_;
    }
    TORCH_INTERNAL_ASSERT(false, "unknown DDP timer event");
  }

  c10::Device device_;
  c10::Event forward_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_end_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_end_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
};

}  // namespace
}  // namespace foo

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, foo::FooTimer);
}  // namespace c10d
