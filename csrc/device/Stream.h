// foo's streams as PyTorch sees them: the stream value type and each device's current stream (per
// thread, as in c10/cuda). How work reaches a stream is device/Launch.h.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "device/Common.h"

namespace foo {

fooStream_t currentStream(c10::DeviceIndex device);
void setCurrentStream(c10::DeviceIndex device, fooStream_t stream);

// A stream as the runtime names it (device, stream handle), and as PyTorch does (c10::Stream).
struct FooStream {
  c10::DeviceIndex device;
  fooStream_t id;

  // Raises for a stream of another device type (a CPU or CUDA stream handed to a foo call).
  static FooStream of(const c10::Stream& stream) {
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "expected a foo stream, but got a stream of ",
                stream.device());
    return {stream.device_index(), static_cast<fooStream_t>(stream.id())};
  }
  static FooStream current(c10::DeviceIndex device) { return {device, currentStream(device)}; }
  c10::Stream unwrap() const { return c10::Stream(c10::Stream::UNSAFE, fooDevice(device), static_cast<c10::StreamId>(id)); }
};

// Makes `event` (never recorded) stand for the runtime event `adopted`, on `device`: as recorded once, so that
// waits, queries and synchronizations reach it (an interprocess event, created or opened).
void adoptEvent(c10::Event& event, fooEvent_t adopted, c10::DeviceIndex device);

}  // namespace foo
