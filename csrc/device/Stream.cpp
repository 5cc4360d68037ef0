#include "device/Stream.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <memory>
#include <mutex>

namespace foo {
namespace {
// Per thread and device, as CUDA's current stream; stream 0 is each device's default stream.
thread_local fooStream_t t_current_stream[FOO_MAX_DEVICES] = {};

thread_local bool t_on_stream_worker = false;

std::mutex g_async_error_mutex;
std::exception_ptr g_async_errors[FOO_MAX_DEVICES];
}  // namespace

namespace detail {
std::atomic<bool> g_async_error_pending{false};

void recordAsyncError(c10::DeviceIndex device, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(g_async_error_mutex);
  if (!g_async_errors[device]) g_async_errors[device] = std::move(error);
  g_async_error_pending = true;
}
}  // namespace detail

fooStream_t currentStream(c10::DeviceIndex device) { return t_current_stream[device]; }

void setCurrentStream(c10::DeviceIndex device, fooStream_t stream) { t_current_stream[device] = stream; }

void checkAsyncErrors(c10::DeviceIndex device) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(g_async_error_mutex);
    std::swap(error, g_async_errors[device]);
    bool pending = false;
    for (const std::exception_ptr& e : g_async_errors) pending = pending || e;
    detail::g_async_error_pending = pending;
  }
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "foo: an asynchronously launched operation on foo:", static_cast<int>(device),
                " failed: ", e.what());
  }
}

void synchronizeStream(c10::DeviceIndex device, fooStream_t stream) {
  FOO_CHECK(fooStreamSynchronize(device, stream));
  checkAsyncErrors(device);
}

void synchronizeDevice(c10::DeviceIndex device) {
  FOO_CHECK(fooDeviceSynchronize(device));
  checkAsyncErrors(device);
}

bool onStreamWorker() { return t_on_stream_worker; }

KernelThreadSettings KernelThreadSettings::current() { return {at::get_num_threads(), denormalFlags()}; }

void KernelThreadSettings::apply() const {
  if (at::get_num_threads() != num_threads) at::set_num_threads(num_threads);
#if defined(__x86_64__)
  if (denormalFlags() != denormal_flags) _mm_setcsr((_mm_getcsr() & ~kDenormalBits) | denormal_flags);
#endif
}

unsigned KernelThreadSettings::denormalFlags() {
#if defined(__x86_64__)
  return _mm_getcsr() & kDenormalBits;
#else
  return 0;
#endif
}

void QueuedWork::enqueue(std::unique_ptr<QueuedWork> work, c10::DeviceIndex device, const char* name,
                         fooActivityKind kind) {
  if (detail::g_async_error_pending.load(std::memory_order_relaxed)) checkAsyncErrors(device);
  work->device_ = device;
  work->settings_ = KernelThreadSettings::current();
  const fooError_t error = fooLaunchKernelEx(
      device, currentStream(device),
      [](void* arg) {
        auto* work = static_cast<QueuedWork*>(arg);
        t_on_stream_worker = true;
        try {
          work->settings_.apply();
          work->run();
        } catch (...) {
          detail::recordAsyncError(work->device_, std::current_exception());
        }
        t_on_stream_worker = false;
      },
      work.get(), [](void* arg) { delete static_cast<QueuedWork*>(arg); }, kind, name);
  FOO_CHECK(error);
  work.release();  // the runtime gives it back through the release function
  if (fooLaunchBlocking()) checkAsyncErrors(device);  // it ran inline: its error belongs to this call
}

}  // namespace foo
