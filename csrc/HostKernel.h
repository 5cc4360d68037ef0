// The one path that runs an operator on foo memory.
//
// PyTorch's CPU kernel executes directly on the device's memory: every foo tensor argument is handed
// to it as a *kernel view*, a CPU tensor aliasing the same bytes through the runtime's kernel mapping
// (no copy). While the kernel runs, host allocations on this thread are redirected into the device's
// memory, so new outputs are born on the device. Afterwards each returned tensor is mapped back: an
// argument's view returns the argument itself, a view of an argument's storage becomes a foo view of
// that storage, and freshly allocated memory is adopted as a foo storage without a copy.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include "Stream.h"

namespace foo {

class HostKernelCall {
 public:
  explicit HostKernelCall(const char* op_name) : op_name_(op_name) {}
  ~HostKernelCall();
  HostKernelCall(const HostKernelCall&) = delete;
  HostKernelCall& operator=(const HostKernelCall&) = delete;

  // Registers a foo tensor argument; returns its kernel view. The lvalue overload borrows the
  // argument, which the caller keeps alive for the whole call; the rvalue one takes it over.
  at::Tensor input(const at::Tensor& foo_tensor);
  at::Tensor input(at::Tensor&& foo_tensor);
  // Registers a CPU tensor argument. As on CUDA, only 0-dim CPU tensors (scalars) may be mixed with
  // foo tensors, unless `any_shape` (CPU index tensors, for example); none may be written to.
  void hostInput(const at::Tensor& cpu_tensor, bool any_shape, bool mutated);
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

  // Writes back changes the kernel made to arguments' metadata or storage (an out= resize).
  void syncArguments();
  // Maps a tensor returned by the kernel to the foo tensor the caller receives. Pass the kernel's
  // result by value (moved): when nothing else holds it, it is turned into the foo tensor in place.
  at::Tensor output(at::Tensor result);

  c10::DeviceIndex device() const { return device_; }

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

  at::Tensor addInput(c10::MaybeOwned<at::Tensor> foo_tensor);
  void prepare();
  void joinDevice(c10::Device device);
  c10::Storage fooStorageFor(const c10::Storage& kernel_storage);
  at::Tensor wrap(c10::Storage storage, const at::Tensor& like) const;

  const char* op_name_;
  c10::DeviceIndex device_ = -1;
  c10::optional<c10::Device> host_conflict_;
  c10::SmallVector<Alias, 4> aliases_;
};

// A CPU tensor aliasing `foo_tensor`'s memory through the kernel view. Views of one foo storage that
// meet in one kernel must share `view_storage`, so that the kernel's overlap checks see them alias.
at::Tensor kernelView(const at::Tensor& foo_tensor, c10::Storage view_storage = {});

// A CPU tensor aliasing host tensor `t`'s memory without owning it, for work queued on a stream.
at::Tensor hostAlias(const at::Tensor& t);

inline bool isFoo(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

}  // namespace foo
