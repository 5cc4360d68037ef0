// The one path that runs an operator on foo memory.
//
// PyTorch's CPU kernel executes directly on the device's memory: every foo tensor argument is handed
// to it as a *kernel view*, a CPU tensor aliasing the same bytes through the runtime's kernel mapping
// (no copy). While the kernel runs, host allocations on this thread are redirected into the device's
// memory, so new outputs are born on the device. Afterwards each returned tensor is mapped back: an
// argument's view returns the argument itself, a view of an argument's storage becomes a foo view of
// that storage, and freshly allocated memory is adopted as a foo storage without a copy.
//
// A call whose outputs' metadata are known in advance (see LaunchPlan.h) is queued on the stream
// instead: its outputs are allocated on the host, and the kernel, running later on the stream's
// worker, writes into them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <memory>
#include <vector>

#include "LaunchPlan.h"
#include "Stream.h"

namespace foo {

class HostKernelCall {
 public:
  // `op` identifies the operator in launch signatures; without it the call always runs synchronously.
  explicit HostKernelCall(const char* op_name, const void* op = nullptr) : op_name_(op_name), signature_(op) {
    if (op == nullptr) signature_.forbid();
  }
  ~HostKernelCall();
  HostKernelCall(const HostKernelCall&) = delete;
  HostKernelCall& operator=(const HostKernelCall&) = delete;

  // Registers a tensor argument (it joins the call's signature) and returns what the kernel receives:
  // a foo tensor's kernel view, or a host tensor. As on CUDA, only 0-dim CPU tensors (scalars) may be
  // mixed with foo tensors, unless `any_shape` (CPU index tensors, for example); none may be written
  // to (`mutated`). A scalar is passed by value, as a kernel argument on CUDA: the kernel gets a copy,
  // so a queued kernel does not see later changes to it. The lvalue overload borrows a foo argument,
  // which the caller keeps alive for the whole call; the rvalue one takes it over.
  at::Tensor argument(const at::Tensor& t, bool mutated = false, bool any_shape = false);
  at::Tensor argument(at::Tensor&& t, bool mutated = false, bool any_shape = false);
  // The device of an operator without foo tensor arguments (a factory op's `device=`).
  void targetDevice(c10::Device device);

  // Runs `kernel` on the device's current stream, after the work queued there, with host allocations
  // redirected to device memory; returns when it is done.
  template <class Kernel>
  void run(Kernel&& kernel) {
    prepare();
    const c10::DeviceIndex device = device_;
    launchKernel(device, [&] {
      RedirectHostAllocations redirect(device);
      kernel();
    });
  }
  // Runs a kernel that only computes metadata (a view's) at once, without waiting for the stream.
  template <class Kernel>
  void runMetadataOnly(Kernel&& kernel) {
    prepare();
    RedirectHostAllocations redirect(device_);
    kernel();
  }

  // The call's signature: tensor arguments join it as they are registered; the caller adds the others.
  LaunchSignature& signature() { return signature_; }
  // The plan of an earlier call with this signature, when this call may be queued; else nullptr.
  std::shared_ptr<LaunchPlan> plan();
  // A kernel that can be queued: it owns what it uses and appends its results (flattened) to the vector.
  using QueuedKernel = std::function<void(std::vector<at::Tensor>&)>;
  // Allocates the outputs `plan` describes, queues `kernel` on the current stream and returns the
  // outputs (flattened, as the kernel returns them) at once.
  std::vector<at::Tensor> launch(std::shared_ptr<LaunchPlan> plan, QueuedKernel kernel);
  // After a synchronous run: remembers the kernel's results (flattened, before output() maps them,
  // grouped as `structure` says) as the plan for later calls with this signature.
  void learn(const std::vector<at::Tensor>& results, std::vector<int> structure, bool arguments_changed);

  // Writes back changes the kernel made to arguments' metadata or storage (an out= resize); returns
  // whether there were any.
  bool syncArguments();
  // Maps a tensor returned by the kernel to the foo tensor the caller receives. Pass the kernel's
  // result by value (moved): when nothing else holds it, it is turned into the foo tensor in place.
  at::Tensor output(at::Tensor result);

  c10::DeviceIndex device() const { return device_; }
  // The dispatch keys of the CPU kernel: nested tensors' when an argument is one.
  c10::DispatchKeySet cpuKernelKeys() const {
    return c10::DispatchKeySet(nested_ ? c10::DispatchKey::NestedTensorCPU : c10::DispatchKey::CPU);
  }

 private:
  struct RedirectHostAllocations {
    explicit RedirectHostAllocations(c10::DeviceIndex device);
    ~RedirectHostAllocations();
    c10::DeviceIndex previous;
  };
  struct Alias {
    c10::MaybeOwned<at::Tensor> foo;
    at::Tensor view;
    c10::StorageImpl* view_storage;
  };

  at::Tensor addArgument(c10::MaybeOwned<at::Tensor> t, bool mutated, bool any_shape);
  at::Tensor addInput(c10::MaybeOwned<at::Tensor> foo_tensor);
  at::Tensor hostInput(const at::Tensor& cpu_tensor, bool any_shape, bool mutated);
  void prepare();
  void joinDevice(c10::Device device);
  c10::Storage fooStorageFor(const c10::Storage& kernel_storage);
  at::Tensor wrap(c10::Storage storage, const at::Tensor& like) const;
  at::Tensor freshOutput(const LaunchPlan::Output& spec) const;

  const char* op_name_;
  LaunchSignature signature_;
  c10::DeviceIndex device_ = -1;
  c10::optional<c10::Device> host_conflict_;
  bool nested_ = false;
  c10::SmallVector<Alias, 4> aliases_;
};

// A CPU tensor aliasing `foo_tensor`'s memory through the kernel view. Views of one foo storage that
// meet in one kernel must share `view_storage`, so that the kernel's overlap checks see them alias.
at::Tensor kernelView(const at::Tensor& foo_tensor, c10::Storage view_storage = {});

// A CPU tensor aliasing host tensor `t`'s memory without owning it, for work queued on a stream.
at::Tensor hostAlias(const at::Tensor& t);

inline bool isFoo(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

}  // namespace foo
