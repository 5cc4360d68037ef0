// A queued launch: an operator call that the host does not wait for.
//
// A GPU kernel is queued once the host knows the shapes of its outputs; ours run PyTorch's CPU kernels,
// which compute output shapes while they run. So a call's outputs' metadata, its *plan*, are known in
// advance in one of two ways: learnt, when an earlier call with the same *signature* (operator, every
// tensor's dtype, shape, strides and aliasing, every other argument's value, the range of numbers that only
// scale values) ran synchronously and returned them (and resized its empty out= arguments); or computed on
// the host by the operator's meta function (FastOps.cpp, MetaFunctions.h), once its kernel ran with the same
// dtypes and layouts and agreed with it (KernelKey). Operators tagged as having data-dependent outputs and
// calls with host tensors always run synchronously.
//
// A call with a plan is queued on the current stream instead of run at once: the host allocates its
// outputs and returns them; later, on the stream's worker, the launch runs the CPU kernel on kernel views
// (KernelViews.h), offers it the outputs the host allocated, and checks its results against the plan.
// The kernel either receives kernel views of the call's foo arguments made on the worker
// (launchWithWorkerViews: the host writes only their layouts, the unboxed fast path) or holds the views
// HostKernelCall::argument() made on the host (launchWithCallerViews: the boxed fallback, whose kernel
// keeps the boxed arguments).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device/Launch.h"
#include "execution/KernelViews.h"
#include "execution/TensorLayout.h"

namespace foo {

class HostKernelCall;  // HostKernel.h: the call being queued

// ---- What a call is known by, and the plan of its outputs ----------------------------------------------

// The words identifying a call; a call that cannot run asynchronously has none.
class LaunchSignature {
 public:
  explicit LaunchSignature(const void* op) {
    words_.push_back(reinterpret_cast<intptr_t>(op));
    // The one process-wide setting that changes outputs' metadata: the default dtype (the dtype of an
    // integer division, or of an integer tensor times a Python float).
    words_.push_back(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  }

  // A foo tensor argument: `slot` is its position among the call's distinct tensors, `storage_slot`
  // the first of them with the same storage (aliasing changes what a kernel may do).
  void tensor(const at::Tensor& t, size_t slot, size_t storage_slot);
  void undefinedTensor() { word(kUndefined); }
  // A 0-dim CPU tensor: its dtype (and whether it is a wrapped Python number) decides type promotion.
  void hostScalar(c10::ScalarType dtype, bool wrapped_number) { word(kHostScalar, static_cast<int64_t>(dtype) * 2 + wrapped_number); }

  void add(const c10::IValue& value);
  void add(const c10::Scalar& value);
  void add(int64_t value) { word(kInt, value); }
  void add(bool value) { word(kBool, value); }
  void add(double value);
  void add(const c10::SymInt& value);
  void add(c10::ScalarType value) { word(kInt, static_cast<int64_t>(value)); }
  void add(c10::IntArrayRef values);
  void add(c10::SymIntArrayRef values);
  void add(at::OptionalIntArrayRef values);
  void add(std::string_view value);
  template <size_t N>
  void add(const std::array<bool, N>& values) {
    for (bool v : values) add(v);
  }
  template <class T>
  void add(const std::optional<T>& value) {
    if (value) {
      add(*value);
    } else {
      word(kNone);
    }
  }

  // For an operator whose floating-point numbers only scale or bound values (numbersOnlyScale): from now on
  // a number adds which dtypes it converts to without overflow, not its value.
  void signNumbersByRange() { numbers_by_range_ = true; }
  void forbid() { allowed_ = false; }
  bool allowed() const { return allowed_; }
  c10::ArrayRef<int64_t> words() const { return words_; }

 private:
  enum Tag : int64_t {
    kUndefined = 1, kTensor, kNone, kInt, kBool, kDouble, kDoubleRange, kComplex, kList, kString, kDevice, kHostScalar
  };
  template <class T>
  void addList(const c10::List<T>& values);
  void word(int64_t tag) { words_.push_back(tag); }
  void word(int64_t tag, int64_t value) {
    words_.push_back(tag);
    words_.push_back(value);
  }

  c10::SmallVector<int64_t, 48> words_;  // on the stack: a call's signature allocates nothing
  bool allowed_ = true;
  bool numbers_by_range_ = false;
};

// Whether the floating-point numbers of operator `op_name` ("aten::add_") only scale, fill or bound the values
// it computes (alpha, addcdiv's value, lerp's weight, fill_, clamp): their values decide neither the outputs'
// metadata nor an error, except a number that does not convert to the tensors' dtype. Their calls are signed
// by the numbers' ranges (signNumbersByRange), so that a learning rate changing at every step (an optimizer
// with a schedule, Adam's bias correction) is one signature, learnt once.
bool numbersOnlyScale(std::string_view op_name);

// The outputs a call with a given signature returned.
struct LaunchPlan {
  struct Output {
    enum Kind { kUndefined, kArgument, kFresh } kind;
    size_t argument = 0;  // kArgument: the position of the tensor argument returned
    TensorLayout layout;  // kFresh: a new tensor with its own storage of `layout.storage_nbytes`
  };
  std::vector<Output> outputs;
  // Arguments without memory that the kernel resizes (an empty out=): the host gives them their layout
  // and memory before the launch, so the kernel writes into them as they are.
  struct Resize {
    size_t argument;
    TensorLayout layout;  // with the size of its new storage
  };
  std::vector<Resize> resized;
  std::vector<int> structure;  // how the caller groups the flat outputs (its returns' list lengths)
  std::string kernel_name;     // the queued kernel's name in a profile: "<operator> kernel"
  // Computed by a meta function, not learnt. A meta function may give one shape other strides than CPU's
  // kernel does (though it agreed on the kernel's first call): the launch copies such a result into the
  // planned layout, and marks the plan stale.
  bool from_meta = false;
  // Set when a queued run returned other metadata than the plan's: the signature runs synchronously
  // from then on.
  std::atomic<bool> stale{false};
};

// What selects CPU's kernel for a call, without the sizes: its operator, its tensors' dtypes (whether each is
// a wrapped Python number or empty) and layout classes (dimension, order of strides, broadcast dimensions),
// its numbers' kinds and its other arguments' values. CPU's kernels refuse some inputs that
// meta functions accept (a dtype, a flag), and a meta function may lay out an output otherwise than the
// kernel for some layouts; so a call of a new shape is planned from its meta function only once a call with
// the same key ran on this thread and its outputs had the meta function's layouts, as CUDA loads a kernel
// once, on its first use, not once per shape.
class KernelKey {
 public:
  explicit KernelKey(const void* op) { words_.push_back(reinterpret_cast<intptr_t>(op)); }
  void add(const at::Tensor& t);
  void add(const std::optional<at::Tensor>& t) { add(t ? *t : at::Tensor()); }
  // A number's kind (an integer tensor times a float is another kernel) and the dtypes it converts to, not its value.
  void add(const c10::Scalar& value);
  void add(int64_t value) { words_.push_back(value); }
  void add(bool value) { words_.push_back(value); }
  void add(const c10::SymInt& value) { words_.push_back(value.is_heap_allocated() ? -1 : value.as_int_unchecked()); }
  void add(std::optional<c10::ScalarType> dtype) { words_.push_back(dtype ? static_cast<int64_t>(*dtype) : -1); }
  // A boxed argument: a tensor as above, a number's kind, an integer's, flag's or string's value (dtypes
  // are integers there), nothing for a list (sizes, dimensions).
  void add(const c10::IValue& value);
  // Sizes and dimensions select no kernel.
  template <class T>
  void add(const T&) {}
  c10::ArrayRef<int64_t> words() const { return words_; }

 private:
  c10::SmallVector<int64_t, 16> words_;
};
bool kernelRan(const KernelKey& key);
void noteKernelRan(const KernelKey& key);

// The plan remembered for `signature` on this thread (learnt, or computed by a meta function), or nullptr.
std::shared_ptr<LaunchPlan> findLaunchPlan(const LaunchSignature& signature);
// False where the signature's plan is stale: it stays so, and the signature synchronous.
bool rememberLaunchPlan(const LaunchSignature& signature, std::shared_ptr<LaunchPlan> plan);
// Forgets the plans of this thread, not its kernels that ran: each call is then of a signature not seen
// before, as a call of new shapes is (tests/test_random_programs.py).
void forgetLaunchPlans();

// ---- The launch -----------------------------------------------------------------------------------------

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
  // An argument resized by the host as planned, which the kernel must leave as it is.
  struct Resized {
    size_t slot;
    KernelViewSpec spec;
    at::Tensor caller_view;  // the kernel view made by the caller, or undefined where the worker makes it
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
  c10::SmallVector<Resized, 1> resized_;
  std::shared_ptr<LaunchPlan> plan_;
  bool plan_from_meta_ = false;  // the plan's, copied: the worker reads nothing of the plan itself
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
