// The one path that runs an operator on foo memory.
//
// PyTorch's CPU kernel executes directly on the device's memory: every foo tensor argument is handed
// to it as a *kernel view*, a CPU tensor aliasing the same bytes through the runtime's kernel mapping
// (no copy). While the kernel runs, host allocations on this thread are redirected into the device's
// memory, so new outputs are born on the device. Afterwards each returned tensor is mapped back: an
// argument's view returns the argument itself, a view of an argument's storage becomes a foo view of
// that storage, and freshly allocated memory is adopted as a foo storage without a copy. A sparse
// tensor is handed over as a CPU sparse tensor over its components' kernel views (SparseKernelViews.cpp).
//
// A call whose outputs' metadata are known in advance is queued on the stream instead (QueuedLaunch.h):
// its outputs are allocated on the host, and the kernel, running later on the stream's worker, writes into
// them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/Launch.h"
#include "device/Sanitizer.h"
#include "execution/KernelViews.h"
#include "execution/QueuedLaunch.h"

namespace foo {

// The first call of a kernel (HostKernelCall::planFromMeta): its key, and the plan its meta function gave
// (not used), or nullptr.
struct FirstUse {
  KernelKey key;
  std::shared_ptr<LaunchPlan> meta_plan;
};

class HostKernelCall {
 public:
  // `op` identifies the operator in launch signatures; without it the call always runs synchronously.
  explicit HostKernelCall(const char* op_name, const void* op = nullptr) : op_name_(op_name), signature_(op) {
    if (op == nullptr) signature_.forbid();
  }
  ~HostKernelCall();
  HostKernelCall(const HostKernelCall&) = delete;
  HostKernelCall& operator=(const HostKernelCall&) = delete;

  // How the kernel uses a tensor argument.
  enum class TensorUse {
    kInput,    // read
    kMutated,  // written (in-place, out=)
    kIndices,  // read; a CPU tensor of any shape is accepted here, as CUDA accepts CPU index tensors
  };
  // Every argument of the call passes through argument(), which adds it to the call's signature.
  // A tensor becomes what the kernel receives: a foo tensor's kernel view, or a host tensor. As on
  // CUDA, only 0-dim CPU tensors (scalars) may be mixed with foo tensors, except as indices, and none
  // may be written to. A scalar is passed by value, as a kernel argument on CUDA: the kernel gets a
  // copy, so a queued kernel does not see later changes to it. The lvalue overload borrows a foo
  // argument, which the caller keeps alive for the whole call; the rvalue one takes it over.
  at::Tensor argument(const at::Tensor& t, TensorUse use = TensorUse::kInput);
  at::Tensor argument(at::Tensor&& t, TensorUse use = TensorUse::kInput);
  std::optional<at::Tensor> argument(const std::optional<at::Tensor>& t, TensorUse use = TensorUse::kInput) {
    if (!t) signature_.undefinedTensor();
    return t ? std::optional<at::Tensor>(argument(*t, use)) : std::nullopt;
  }
  // argument() in two steps, for a caller that learns whether the call is queued (plan()) only once
  // every argument is in the signature: declare() adds a tensor to the signature (and checks it), then
  // kernelArgument() returns what the kernel receives: its kernel view, or with `queued` an undefined
  // placeholder for a foo tensor, whose kernel view the queued kernel receives on the stream's worker
  // (at the position slotOf() gives). A foo tensor must be declared before its kernelArgument().
  void declare(const at::Tensor& t, TensorUse use = TensorUse::kInput);
  void declare(const std::optional<at::Tensor>& t, TensorUse use = TensorUse::kInput) {
    if (t) {
      declare(*t, use);
    } else {
      signature_.undefinedTensor();
    }
  }
  at::Tensor kernelArgument(const at::Tensor& t, TensorUse use, bool queued);
  // The position of foo tensor `t` among the call's distinct foo tensors, or -1 for any other tensor.
  int slotOf(const at::Tensor& t) const;
  // Any other argument is returned as it is.
  template <class T>
  const T& argument(const T& value) {
    signature_.add(value);
    return value;
  }
  // The call has outputs that depend on values, or reads values on the host: it must not be queued, and the
  // host waits for it as on CUDA.
  void keepSynchronous() {
    signature_.forbid();
    cuda_waits_ = true;
  }
  // The operator's numbers only scale or bound values (numbersOnlyScale): call it before the arguments.
  void signNumbersByRange() { signature_.signNumbersByRange(); }
  // The call draws random numbers: queued like any call, it draws when it runs, in launch order (see
  // Generator.h).
  void drawsRandomNumbers() { draws_random_numbers_ = true; }
  // Gives the views of arguments that require grad that flag too, and adds it to the signature: CPU's
  // sparse kernels keep what backward needs only then (the argmax of torch.sparse.mm's amax). Call it
  // once, after the arguments.
  void markViewsRequiringGrad();
  // The device of an operator without foo tensor arguments (a factory op's `device=`).
  void targetDevice(c10::Device device);

  // Runs `kernel` on the device's current stream, after the work queued there, with host allocations
  // redirected to device memory; returns when it is done.
  template <class Kernel>
  void run(Kernel&& kernel) {
    prepare();
    if (sanitizer::enabled()) sanitizeArguments();
    const c10::DeviceIndex device = device_;
    const std::string name = profiledKernelName();
    runAfterStream(device, name.empty() ? op_name_ : name.c_str(), [&] {
      RedirectHostAllocations redirect(device);
      kernel();
    }, fooActivityKindKernel, cuda_waits_ ? HostWait::kAsOnCuda : HostWait::kFooOnly);
  }
  // Queues `kernel` on the current stream: it owns what it uses (kernel views of arguments and of outputs
  // allocated beforehand), as a kernel whose outputs are known before it runs (foo_backend.ops).
  template <class Kernel>
  void queue(Kernel&& kernel) {
    prepare();
    if (sanitizer::enabled()) sanitizeArguments();
    const std::string name = profiledKernelName();
    enqueueOnStream(device_, name.empty() ? nullptr : name.c_str(), std::forward<Kernel>(kernel));
  }
  // Runs a kernel that only computes metadata (a view's) at once, without waiting for the stream.
  template <class Kernel>
  void runMetadataOnly(Kernel&& kernel) {
    prepare();
    RedirectHostAllocations redirect(device_);
    kernel();
  }

  // The plan of an earlier call with this signature, when this call may be queued (QueuedLaunch.h);
  // else nullptr.
  std::shared_ptr<LaunchPlan> plan();
  // For a call plan() found no plan for: whether its outputs' layouts may be computed on the host instead
  // of learnt by running it (its meta function: FastOps.cpp, MetaFunctions.h). Not where
  // one of the foo arguments sharing memory is written (a meta function sees no overlap between separate meta
  // tensors), nor where one carries conjugate or negative bits, which meta tensors do not.
  bool mayPlanFromMeta();
  // For a call that mayPlanFromMeta() allows: its plan from the operator's meta function instead of a run,
  // remembered for later calls with this signature. `meta(outputs)` appends the outputs' meta tensors
  // (flattened, grouped as `structure` says; an argument's own meta tensor from metaOf() is that argument,
  // and a FastOps call that returns the argument it writes appends none) and returns whether they make a plan
  // (not where it resized an argument, nor where an argument's metaOf() changed); where it raises, the call runs and raises
  // CPU's error, and its warnings are dropped (the kernel warns when it runs). As CUDA loads a kernel once,
  // on its first use: only once a call with `key` ran on this thread and its results matched the meta
  // function's outputs (an operator whose meta function disagrees with CPU's kernel is learnt by running),
  // or while a capture records the call; before, `first_use` takes the key and the meta function's outputs,
  // for noteFirstUse() once the call ran.
  std::shared_ptr<LaunchPlan> planFromMeta(KernelKey key, c10::function_ref<bool(std::vector<at::Tensor>&)> meta,
                                           std::vector<int> structure, std::optional<FirstUse>& first_use);
  // After the first call of a kernel ran and syncArguments(): notes its key as ran (kernelRan) where its
  // results (flattened) and the arguments it resized have the layouts its meta function planned.
  void noteFirstUse(const FirstUse& first_use, const std::vector<at::Tensor>& results) const;
  // What a meta function receives for an argument: for a foo argument (or its kernel view), the argument's meta
  // tensor (metaLike), the same one at each use (an in-place meta function writes it and returns it; an out=
  // one resizes it); any other tensor (a host scalar) as it is. writtenMetaOf(): for an argument the meta
  // function writes.
  at::Tensor metaOf(const at::Tensor& argument);
  at::Tensor& writtenMetaOf(const at::Tensor& argument);
  // After a synchronous run and syncArguments(): remembers the kernel's results (flattened, before output()
  // maps them, grouped as `structure` says) and the arguments it resized as the plan for later calls with
  // this signature; nothing where it changed arguments otherwise.
  void learn(const std::vector<at::Tensor>& results, std::vector<int> structure);

  // Writes back changes the kernel made to arguments' metadata or storage (an out= resize).
  void syncArguments();
  // Maps a tensor returned by the kernel to the foo tensor the caller receives. Pass the kernel's
  // result by value (moved): when nothing else holds it, it is turned into the foo tensor in place.
  at::Tensor output(at::Tensor result);

  c10::DeviceIndex device() const { return device_; }
  // Whether the arguments are on two devices (two foo devices, or foo and the host): the call raises CUDA's
  // error for it as it runs (see prepare()).
  bool mixesDevices() const { return device_conflict_.has_value() || host_conflict_.has_value(); }
  // The name of the operator's kernel in a profile (distinct from the operator's own row).
  std::string kernelName() const { return std::string(op_name_) + " kernel"; }
  // kernelName() while the runtime traces launches, else empty: only a profile needs it, and a call that
  // learns no launch plan would build it each time.
  std::string profiledKernelName() const { return fooActivityIsEnabled() ? kernelName() : std::string(); }

 private:
  friend class QueuedLaunch;  // reads the foo arguments and the device of the call it queues
  struct Alias {
    c10::MaybeOwned<at::Tensor> foo;
    at::Tensor view;  // made when first needed
    c10::StorageImpl* view_storage;
    size_t storage_slot;  // the first alias with the same storage
    bool written = false;  // the kernel writes it (in place, out=)
    // The kernel gave it memory and a layout, and nothing else: an empty out= argument it resized.
    bool resized = false;
    at::Tensor meta;  // made by metaOf() when first needed
  };
  // A sparse foo argument: its kernel view is a CPU sparse tensor whose components (indices, values)
  // are the kernel views of the foo components, which are ordinary aliases. `parts` are the view's
  // components when it was made, to see whether the kernel replaced them.
  struct SparseAlias {
    c10::MaybeOwned<at::Tensor> foo;
    at::Tensor view;
    c10::SmallVector<c10::TensorImpl*, 3> parts;
  };

  // Whether the dispatch state lets the call be queued (see plan()).
  bool mayQueue();
  // Whether the call is being captured into a graph: it cannot run at the call, only be recorded.
  bool capturing();
  at::Tensor addArgument(c10::MaybeOwned<at::Tensor> t, TensorUse use);
  at::Tensor addInput(c10::MaybeOwned<at::Tensor> foo_tensor, TensorUse use = TensorUse::kInput);
  // A strided foo tensor joins the call and its signature, without a kernel view yet; returns its slot.
  size_t addStridedInput(c10::MaybeOwned<at::Tensor> foo_tensor, TensorUse use);
  const at::Tensor& viewOf(size_t slot);
  at::Tensor addSparseInput(c10::MaybeOwned<at::Tensor> foo_tensor);
  at::Tensor sparseOutput(const at::Tensor& result);
  bool syncSparseArgument(SparseAlias& s);
  at::Tensor hostInput(const at::Tensor& cpu_tensor, TensorUse use);
  void signHostInput(const at::Tensor& cpu_tensor, TensorUse use);
  at::Tensor hostValue(const at::Tensor& cpu_tensor, TensorUse use);
  void prepare();
  // Checks the foo arguments' accesses as the next launch (torch.foo.sanitizer): raises on a hazard.
  void sanitizeArguments();
  // The call's accesses for the sanitizer: its arguments once sanitizeArguments() ran. Memory allocated for
  // the launch (its outputs) joins them, recorded under the same description (one stack gathered per call).
  sanitizer::LaunchAccesses& sanitized();
  void joinDevice(c10::Device device);
  at::Tensor* argumentMeta(const at::Tensor& argument);  // the meta tensor of a foo argument, or nullptr
  // Whether the kernel's change to the argument in `slot`, seen by syncArguments(), is one a plan can make in
  // advance: an argument without memory (an empty out=), alone on its storage, given memory and a layout.
  bool resizePlannable(size_t slot, bool had_no_memory) const;
  // For a queued call: gives the argument in `slot` the layout and new memory of `resize`, as its kernel
  // would; a kernel view made already follows.
  void resizeAsPlanned(size_t slot, const TensorLayout& resize);
  c10::Storage fooStorageFor(const c10::Storage& kernel_storage);
  // Tells the sanitizer that the call wrote a storage it gave the device (a result born during the kernel).
  void recordWritten(const c10::Storage& storage);

  const char* op_name_;
  LaunchSignature signature_;
  c10::DeviceIndex device_ = -1;
  std::optional<c10::Device> device_conflict_;  // a second foo device among the arguments
  std::optional<c10::Device> host_conflict_;
  c10::SmallVector<Alias, 4> aliases_;
  c10::SmallVector<SparseAlias, 2> sparse_aliases_;
  bool draws_random_numbers_ = false;
  bool unplannable_changes_ = false;  // syncArguments() saw changes to arguments no plan can make
  // CUDA's host waits for this call too (keepSynchronous(), host tensors to copy), not only foo's.
  bool cuda_waits_ = false;
  std::unique_ptr<sanitizer::LaunchAccesses> sanitized_;  // made by sanitized()
};

inline bool isFoo(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// A meta tensor with `t`'s sizes, strides and dtype: what a meta function needs of an argument (its storage
// offset decides no output's layout).
at::Tensor metaLike(const at::Tensor& t);

// A compressed sparse tensor (CSR, CSC, BSR or BSC), which SparseCsrTensorImpl holds.
inline bool isSparseCompressed(const at::Tensor& t) {
  const c10::Layout layout = t.layout();
  return layout == c10::kSparseCsr || layout == c10::kSparseCsc || layout == c10::kSparseBsr ||
         layout == c10::kSparseBsc;
}

}  // namespace foo
