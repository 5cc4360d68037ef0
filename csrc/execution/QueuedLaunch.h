// A queued launch: an operator call that the host does not wait for.
//
// A call whose outputs' metadata are known in advance (LaunchPlan.h) is queued on the current stream
// instead of run at once: the host allocates its outputs and returns them; later, on the stream's
// worker, the launch runs the CPU kernel on kernel views (KernelViews.h), offers it the outputs the
// host allocated, and checks its results against the plan. The kernel either receives kernel views of
// the call's foo arguments made on the worker (launchWithWorkerViews: the host writes only their
// layouts, the unboxed fast path) or holds the views HostKernelCall::argument() made on the host
// (launchWithCallerViews: the boxed fallback, whose kernel keeps the boxed arguments).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "device/Launch.h"
#include "execution/HostKernel.h"
#include "execution/KernelViews.h"
#include "execution/LaunchPlan.h"

namespace foo {

// The outputs of a queued launch, flattened as the kernel returns them.
using LaunchOutputs = c10::SmallVector<at::Tensor, 2>;

// Work queued on a stream for one operator call. The kernel-independent part runs here (views, output
// hints, the check against the plan); the kernel itself is the subclass's (QueuedLaunchOf below).
class QueuedLaunch : public QueuedWork {
 public:
  const char* kernelName() const { return plan_->kernel_name.c_str(); }

 protected:
  // With the dispatch keys of the launching thread, which the kernel runs with.
  QueuedLaunch() : keys_(c10::impl::tls_local_dispatch_key_set()) {}
  // Allocates the outputs of `plan` for `call`, fills this launch, queues it and returns the outputs.
  static LaunchOutputs queue(std::unique_ptr<QueuedLaunch> launch, HostKernelCall& call,
                             std::shared_ptr<LaunchPlan> plan, bool views_on_worker);

 private:
  // `views` are the kernel views of the call's foo arguments, by slot (HostKernelCall::slotOf), when
  // the views are made on the worker; else empty. The kernel appends its results (flattened).
  virtual void runKernel(c10::ArrayRef<at::Tensor> views, std::vector<at::Tensor>& results) = 0;
  void run() final;
  // The kernel views of the inputs, made on this thread; or, for a captured launch, kept from its first run.
  c10::SmallVector<at::Tensor, 4> makeInputViews() const;
  c10::ArrayRef<at::Tensor> keptInputViews();

  // Members in the order the worker reads them, flags before the specs they qualify: the host writes a
  // launch at every call, and each cache line it writes is one the worker must fetch from another core.
  struct Input {
    size_t storage_slot;  // the first slot with the same storage: their views share one
    KernelViewSpec spec;
  };
  struct Output {
    bool fresh = false;  // allocated by the host for this launch (else an argument, or undefined)
    KernelViewSpec spec;
  };
  // A captured launch runs at each replay of its graph: it keeps the views it made on its first run.
  struct KeptViews {
    // Launches of one graph run in order, but one replayed inside another need not: the first run makes
    // the views under the mutex. Checked through `made` first: std::call_once would cost thread-local
    // bookkeeping at every replay.
    std::mutex mutex;
    std::atomic<bool> made{false};
    c10::SmallVector<at::Tensor, 4> views;
  };
  c10::impl::LocalDispatchKeySet keys_;  // the caller's, which the kernel runs with
  std::unique_ptr<KeptViews> kept_;      // for a captured launch only
  c10::SmallVector<Input, 3> inputs_;    // only when the views are made on the worker
  c10::SmallVector<Output, 1> outputs_;
  std::shared_ptr<LaunchPlan> plan_;
  const char* op_name_ = nullptr;
};

// A queued launch with its kernel, `kernel(views, results)`: built where it is queued from, so what the
// kernel owns is never moved again.
template <class Kernel>
class QueuedLaunchOf final : public QueuedLaunch {
 public:
  explicit QueuedLaunchOf(Kernel&& kernel) : kernel_(std::move(kernel)) {}
  static LaunchOutputs queue(HostKernelCall& call, std::shared_ptr<LaunchPlan> plan, Kernel kernel,
                             bool views_on_worker) {
    return QueuedLaunch::queue(std::make_unique<QueuedLaunchOf>(std::move(kernel)), call, std::move(plan),
                               views_on_worker);
  }

 private:
  void runKernel(c10::ArrayRef<at::Tensor> views, std::vector<at::Tensor>& results) override {
    kernel_(views, results);
  }
  Kernel kernel_;
};

// Queues `kernel(views, results)` for `call` with `plan` (HostKernelCall::plan()) and returns its outputs at
// once. `views` are the kernel views of the call's foo arguments, made on the stream's worker, by slot
// (HostKernelCall::slotOf); the kernel owns everything else it uses and appends its results (flattened).
template <class Kernel>
LaunchOutputs launchWithWorkerViews(HostKernelCall& call, std::shared_ptr<LaunchPlan> plan, Kernel kernel) {
  return QueuedLaunchOf<Kernel>::queue(call, std::move(plan), std::move(kernel), /*views_on_worker=*/true);
}

// As launchWithWorkerViews, for a kernel, `kernel(results)`, that holds the views HostKernelCall::argument()
// returned.
template <class Kernel>
LaunchOutputs launchWithCallerViews(HostKernelCall& call, std::shared_ptr<LaunchPlan> plan, Kernel kernel) {
  auto without_views = [kernel = std::move(kernel)](c10::ArrayRef<at::Tensor>, std::vector<at::Tensor>& results) mutable {
    kernel(results);
  };
  return QueuedLaunchOf<decltype(without_views)>::queue(call, std::move(plan), std::move(without_views),
                                                         /*views_on_worker=*/false);
}

}  // namespace foo
