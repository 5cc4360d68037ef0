#include "device/Stream.h"

namespace foo {
namespace {
// Per thread and device, as CUDA's current stream; stream 0 is each device's default stream.
thread_local fooStream_t t_current_stream[FOO_MAX_DEVICES] = {};
}  // namespace

fooStream_t currentStream(c10::DeviceIndex device) { return t_current_stream[device]; }

void setCurrentStream(c10::DeviceIndex device, fooStream_t stream) { t_current_stream[device] = stream; }

}  // namespace foo
