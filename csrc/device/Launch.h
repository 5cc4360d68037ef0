// The launch path: every kernel and copy on foo memory reaches a stream through runAfterStream (the
// host waits for it) or enqueueOnStream (queued: the host goes on), on the device's current stream
// (device/Stream.h). A queued kernel's exception is an asynchronous error, raised by a later call.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>

#include "device/Common.h"
#include "device/Stream.h"

namespace foo {

// Raises, once, the error of an asynchronous launch that failed on `device` since the last check.
void checkAsyncErrors(c10::DeviceIndex device);
// Waits for the work of one stream or of a whole device, then reports asynchronous failures.
void synchronizeStream(c10::DeviceIndex device, fooStream_t stream);
void synchronizeDevice(c10::DeviceIndex device);

// torch.foo.set_sync_debug_mode, as c10::cuda's SyncDebugMode: what an operation that makes the host wait
// for a foo stream does first (explicit synchronisation excepted).
enum class SyncDebugMode { kDefault = 0, kWarn = 1, kError = 2 };
void setSyncDebugMode(SyncDebugMode mode);
SyncDebugMode syncDebugMode();
// Every implicit host wait passes here before it waits: it warns or raises ("called a synchronizing foo
// operation: <what>") as the mode says, and counts the wait (tests ask whether an operation waited).
void beforeHostWait(const char* what);
uint64_t hostWaitCount();

// Fault injection (torch.foo.faults.fail_launch): the next call of operator `op` ("aten::mul") on `device`
// fails as a device-side assert does: it is launched, then an error queued behind it on the stream is
// raised by the next synchronizing call. failInjectedLaunch() queues that error where `op` is armed.
void armLaunchFailure(c10::DeviceIndex device, std::string op);
void failInjectedLaunch(c10::DeviceIndex device, const char* op);
namespace detail {
extern std::atomic<bool> g_launch_failure_armed;
}  // namespace detail
inline bool launchFailureArmed() { return detail::g_launch_failure_armed.load(std::memory_order_relaxed); }

// Fault injection (torch.foo.faults.lose_device): after `launches` more launches on `device`, the device is
// lost, as a GPU that stops responding: that launch and every later launch, allocation or synchronization on
// it raise, until restoreDevice() (no GPU comes back; a test needs its device again). Freeing still works, and
// the other devices go on.
void loseDevice(c10::DeviceIndex device, int64_t launches);
void restoreDevice(c10::DeviceIndex device);
namespace detail {
extern std::atomic<bool> g_device_loss_armed;
void countLaunchTowardsLoss(c10::DeviceIndex device);
void raiseIfLost(c10::DeviceIndex device);
}  // namespace detail
// A launch on `device` (counts towards an armed loss), and any other use of it: both raise once it is lost.
inline void beforeLaunchOn(c10::DeviceIndex device) {
  if (C10_UNLIKELY(detail::g_device_loss_armed.load(std::memory_order_relaxed))) detail::countLaunchTowardsLoss(device);
}
inline void checkDeviceNotLost(c10::DeviceIndex device) {
  if (C10_UNLIKELY(detail::g_device_loss_armed.load(std::memory_order_relaxed))) detail::raiseIfLost(device);
}

namespace detail {
void recordAsyncError(c10::DeviceIndex device, std::exception_ptr error);
extern std::atomic<bool> g_async_error_pending;
}  // namespace detail

namespace detail {
extern thread_local bool t_running_after_stream;
}  // namespace detail
// True on a host thread inside runAfterStream's kernel: its stream is idle and held, so the kernel may use
// memory the stream's later work will use, at once.
inline bool runningAfterStream() { return detail::t_running_after_stream; }

// What a host wait in runAfterStream is to the program (the sanitizer orders later launches after the
// stream's work only for the first): one CUDA makes too (a host read, a copy with pageable memory, output
// shapes that depend on values), or foo's own (a call foo runs at once where CUDA would queue it).
enum class HostWait { kAsOnCuda, kFooOnly };

// While it lives (when `hide`), the sanitizer does not see this thread's host waits (HostWait::kFooOnly).
class HiddenHostWaits {
 public:
  explicit HiddenHostWaits(bool hide) : hidden_(hide && fooSanitizerGetChecks() != 0) {
    if (hidden_) fooSanitizerHideHostWaits(1);
  }
  ~HiddenHostWaits() {
    if (hidden_) fooSanitizerHideHostWaits(0);
  }
  HiddenHostWaits(const HiddenHostWaits&) = delete;
  HiddenHostWaits& operator=(const HiddenHostWaits&) = delete;

 private:
  const bool hidden_;
};

// Runs `kernel()` on `device`'s current stream after the work already queued there, and returns when
// it is done: for work whose results the host needs at once (an operator's output shapes, a copy into
// pageable memory), so it is a host wait (beforeHostWait) whether or not the stream is busy. The calling
// thread waits for the stream to drain and runs the kernel itself, so it keeps its thread-local state
// (grad mode, inference mode, dispatch modes) and its exceptions. The runtime's activity tracing records
// it as work of the stream, named `name`.
template <class Kernel>
void runAfterStream(c10::DeviceIndex device, const char* name, Kernel&& kernel,
                    fooActivityKind kind = fooActivityKindKernel, HostWait wait = HostWait::kAsOnCuda) {
  beforeLaunchOn(device);
  beforeHostWait(name);
  const HiddenHostWaits hidden(wait == HostWait::kFooOnly);
  if (detail::g_async_error_pending.load(std::memory_order_relaxed)) checkAsyncErrors(device);
  const fooStream_t stream = currentStream(device);
  const fooError_t state = fooStreamQuery(device, stream);
  if (state == fooErrorNotReady) {
    synchronizeStream(device, stream);  // raises the errors of the work it waited for, before the kernel runs
  } else {
    FOO_CHECK(state);
  }
  struct Call {
    std::remove_reference_t<Kernel>* kernel;
    std::exception_ptr error;
  } call{&kernel, nullptr};
  const auto run = [](void* arg) {
    auto* c = static_cast<Call*>(arg);
    const bool outer = detail::t_running_after_stream;
    detail::t_running_after_stream = true;
    try {
      (*c->kernel)();
    } catch (...) {
      c->error = std::current_exception();
    }
    detail::t_running_after_stream = outer;
  };
  FOO_CHECK(fooStreamRunSynchronous(device, stream, run, &call, kind, name));
  if (call.error) std::rethrow_exception(call.error);
}

// The per-thread settings that change what a CPU kernel computes: its intra-op thread count (which
// decides how reductions and matmuls split their work) and, on x86, whether denormals are flushed
// (torch.set_flush_denormal). A queued kernel runs with those of the thread that launched it.
struct KernelThreadSettings {
  int num_threads = 1;
  unsigned denormal_flags = 0;

  static KernelThreadSettings current();
  // Makes them this thread's; cheap when they already are.
  void apply() const;

 private:
  static constexpr unsigned kDenormalBits = 0x8040;  // x86's MXCSR flush-to-zero and denormals-are-zero
  static unsigned denormalFlags();
};

// Work queued on a stream by enqueueOnStream: one allocation holding the kernel and what it owns.
class QueuedWork {
 public:
  virtual ~QueuedWork() = default;
  // One block per launch, allocated and freed (see fooLaunchKernelEx) on the launching host thread: a
  // per-thread cache of blocks serves it, since glibc's own cache takes only blocks up to 1 KB.
  static void* operator new(size_t size);
  static void operator delete(void* block, size_t size);
  // Queues `work` on `device`'s current stream (see enqueueOnStream).
  static void enqueue(std::unique_ptr<QueuedWork> work, c10::DeviceIndex device, const char* name,
                      fooActivityKind kind = fooActivityKindKernel);
  // enqueue() without first raising a pending asynchronous error (for work queued where raising is not
  // allowed: an injected failure, queued as a call ends).
  static void enqueueBehindErrors(std::unique_ptr<QueuedWork> work, c10::DeviceIndex device, const char* name,
                                  fooActivityKind kind = fooActivityKindKernel);

 private:
  virtual void run() = 0;
  c10::DeviceIndex device_ = -1;
  KernelThreadSettings settings_;
};

// A kernel as queued work: built where it is queued from, so what it holds is never moved again.
template <class Kernel>
class QueuedKernel final : public QueuedWork {
 public:
  template <class... Args>
  explicit QueuedKernel(Args&&... args) : kernel(std::forward<Args>(args)...) {}
  Kernel kernel;

 private:
  void run() override { kernel(); }
};

// Queues `kernel()` on `device`'s current stream and returns at once. The kernel must own (capture by
// value) every tensor it touches, which also keeps their memory from being reused before it runs. An
// exception it throws is raised by the next synchronization of the device, as CUDA reports
// asynchronous errors (with FOO_LAUNCH_BLOCKING=1, it runs inline and raises at once). It is destroyed
// on a host thread after it ran (see fooLaunchKernelEx).
// Activity tracing records it as work of the stream, named `name`.
template <class Kernel>
void enqueueOnStream(c10::DeviceIndex device, const char* name, Kernel&& kernel,
                     fooActivityKind kind = fooActivityKindKernel) {
  QueuedWork::enqueue(std::make_unique<QueuedKernel<std::decay_t<Kernel>>>(std::forward<Kernel>(kernel)), device,
                      name, kind);
}

// True on a stream's worker thread, inside a kernel queued by enqueueOnStream: such code must not
// wait for the device (its own stream would wait for itself).
bool onStreamWorker();

}  // namespace foo
