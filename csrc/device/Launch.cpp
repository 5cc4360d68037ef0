#include "device/Launch.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "runtime/thread_cache.h"

namespace foo {
namespace {
thread_local bool t_on_stream_worker = false;

std::mutex g_async_error_mutex;
std::exception_ptr g_async_errors[FOO_MAX_DEVICES];

std::atomic<SyncDebugMode> g_sync_debug_mode{SyncDebugMode::kDefault};
std::atomic<uint64_t> g_host_waits{0};
}  // namespace

void setSyncDebugMode(SyncDebugMode mode) { g_sync_debug_mode.store(mode, std::memory_order_relaxed); }

SyncDebugMode syncDebugMode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void beforeHostWait(const char* what) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  const SyncDebugMode mode = syncDebugMode();
  if (mode == SyncDebugMode::kDefault) return;
  const std::string message = std::string("called a synchronizing foo operation: ") + (what ? what : "a host wait");
  TORCH_CHECK(mode != SyncDebugMode::kError, message);
  TORCH_WARN(message);
}

uint64_t hostWaitCount() { return g_host_waits.load(std::memory_order_relaxed); }

namespace detail {
thread_local bool t_running_after_stream = false;
std::atomic<bool> g_async_error_pending{false};

void recordAsyncError(c10::DeviceIndex device, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(g_async_error_mutex);
  if (!g_async_errors[device]) g_async_errors[device] = std::move(error);
  g_async_error_pending = true;
}
}  // namespace detail

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
  checkDeviceNotLost(device);
  FOO_CHECK(fooStreamSynchronize(device, stream));
  checkAsyncErrors(device);
}

void synchronizeDevice(c10::DeviceIndex device) {
  checkDeviceNotLost(device);
  FOO_CHECK(fooDeviceSynchronize(device));
  checkAsyncErrors(device);
}

bool onStreamWorker() { return t_on_stream_worker; }

namespace detail {
std::atomic<bool> g_launch_failure_armed{false};
}  // namespace detail

namespace {
std::mutex g_launch_failures_mutex;
std::vector<std::pair<c10::DeviceIndex, std::string>> g_launch_failures;  // armed, not yet taken
}  // namespace

void armLaunchFailure(c10::DeviceIndex device, std::string op) {
  std::lock_guard<std::mutex> lock(g_launch_failures_mutex);
  g_launch_failures.emplace_back(device, std::move(op));
  detail::g_launch_failure_armed = true;
}

void failInjectedLaunch(c10::DeviceIndex device, const char* op) {
  {
    std::lock_guard<std::mutex> lock(g_launch_failures_mutex);
    const auto armed = std::find_if(g_launch_failures.begin(), g_launch_failures.end(),
                                    [&](const auto& failure) { return failure.first == device && failure.second == op; });
    if (armed == g_launch_failures.end()) return;
    g_launch_failures.erase(armed);
    detail::g_launch_failure_armed = !g_launch_failures.empty();
  }
  const auto fail = [name = std::string(op)] {
    TORCH_CHECK(false, "device-side assert triggered in ", name, " (injected by torch.foo.faults.fail_launch)");
  };
  QueuedWork::enqueueBehindErrors(std::make_unique<QueuedKernel<decltype(fail)>>(fail), device, "injected failure");
}

namespace detail {
std::atomic<bool> g_device_loss_armed{false};
}  // namespace detail

namespace {
struct DeviceLoss {
  int64_t launches_left = -1;  // armed: the launches that succeed before the loss
  bool lost = false;
};
std::mutex g_device_loss_mutex;
DeviceLoss g_device_loss[FOO_MAX_DEVICES];

void refreshDeviceLossArmed() {
  bool armed = false;
  for (const DeviceLoss& loss : g_device_loss) armed = armed || loss.lost || loss.launches_left >= 0;
  detail::g_device_loss_armed = armed;
}

[[noreturn]] void raiseLost(c10::DeviceIndex device) {
  TORCH_CHECK(false, "foo:", static_cast<int>(device), " was lost: the device stopped responding (injected by "
              "torch.foo.faults.lose_device); every launch, allocation or synchronization on it fails");
}
}  // namespace

void loseDevice(c10::DeviceIndex device, int64_t launches) {
  std::lock_guard<std::mutex> lock(g_device_loss_mutex);
  g_device_loss[device].launches_left = launches;
  refreshDeviceLossArmed();
}

void restoreDevice(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(g_device_loss_mutex);
  g_device_loss[device] = DeviceLoss{};
  refreshDeviceLossArmed();
}

namespace detail {
void countLaunchTowardsLoss(c10::DeviceIndex device) {
  {
    std::lock_guard<std::mutex> lock(g_device_loss_mutex);
    DeviceLoss& loss = g_device_loss[device];
    if (!loss.lost && loss.launches_left >= 0 && loss.launches_left-- == 0) loss.lost = true;
    if (!loss.lost) return;
  }
  raiseLost(device);
}

void raiseIfLost(c10::DeviceIndex device) {
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(g_device_loss_mutex);
    lost = g_device_loss[device].lost;
  }
  if (lost) raiseLost(device);
}
}  // namespace detail

namespace {

// Free blocks by size class (steps of 64 bytes up to 4 KB), each class a bounded list.
class WorkBlockCache {
 public:
  void* take(size_t size) {
    const size_t c = classOf(size);
    if (c >= kClasses) return ::operator new(size);
    if (FreeBlock* block = free_[c]) {
      free_[c] = block->next;
      --count_[c];
      // The stream's worker read the next block when it ran the work it held: ask for its lines a launch ahead.
      foo_runtime::prepareForWriting(free_[c], (c + 1) * kStep);
      return block;
    }
    return ::operator new((c + 1) * kStep);
  }
  // False when the caller must free it itself.
  bool give(void* block, size_t size) {
    const size_t c = classOf(size);
    if (c >= kClasses || count_[c] >= kMaxPerClass) return false;
    free_[c] = new (block) FreeBlock{free_[c]};
    ++count_[c];
    return true;
  }
  ~WorkBlockCache() {
    for (FreeBlock* list : free_) {
      while (list != nullptr) {
        FreeBlock* next = list->next;
        ::operator delete(list);
        list = next;
      }
    }
  }

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  static constexpr size_t kStep = 64;
  static constexpr size_t kClasses = 64;
  static constexpr size_t kMaxPerClass = 256;
  static size_t classOf(size_t size) { return (size - 1) / kStep; }
  FreeBlock* free_[kClasses] = {};
  uint16_t count_[kClasses] = {};
};

thread_local foo_runtime::ThreadCache<WorkBlockCache> t_work_blocks;

}  // namespace

void* QueuedWork::operator new(size_t size) { return t_work_blocks.cache.take(size); }

void QueuedWork::operator delete(void* block, size_t size) {
  // A block given back after the thread's cache is gone (work released at exit) goes to the heap.
  if (!foo_runtime::ThreadCache<WorkBlockCache>::alive || !t_work_blocks.cache.give(block, size)) ::operator delete(block);
}

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
  beforeLaunchOn(device);
  if (detail::g_async_error_pending.load(std::memory_order_relaxed)) checkAsyncErrors(device);
  enqueueBehindErrors(std::move(work), device, name, kind);
}

void QueuedWork::enqueueBehindErrors(std::unique_ptr<QueuedWork> work, c10::DeviceIndex device, const char* name,
                                     fooActivityKind kind) {
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
