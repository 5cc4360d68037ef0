// Kernel views: how a CPU kernel reaches foo memory.
//
// A foo data pointer is a device address that host code cannot dereference. The runtime maps each
// device's memory a second time, readable and writable by the host (the kernel mapping): a *kernel
// view* is a CPU tensor over a foo tensor's bytes there, which PyTorch's CPU kernels run on directly.
//
// Loading foo replaces PyTorch's CPU allocator (c10::SetCPUAllocator) by a redirect: outside a host
// kernel it is the original allocator; while a kernel runs on foo memory (RedirectHostAllocations),
// the CPU tensors the kernel creates are allocated in the device's memory, so new outputs are born on
// the device and become foo tensors without a copy. A queued kernel is offered the outputs the host
// allocated for it first (OfferOutputHints).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/SmallVector.h>

#include "execution/TensorLayout.h"

namespace foo {

// A CPU tensor aliasing `foo_tensor`'s memory through the kernel mapping. Views of one foo storage that
// meet in one kernel must share `view_storage`, so that the kernel's overlap checks see them alias.
at::Tensor kernelView(const at::Tensor& foo_tensor, c10::Storage view_storage = {});
// A kernel view described by value: a foo tensor's kernel address and layout, which a queued kernel turns
// into a kernel view on its stream's worker. The worker then creates and recycles its views itself, and
// the host never touches objects the worker wrote (each such access costs a transfer between caches).
struct KernelViewSpec {
  KernelViewSpec() = default;
  explicit KernelViewSpec(const at::Tensor& foo_tensor);
  void* data = nullptr;  // the storage's start, through the kernel mapping
  c10::DeviceIndex device = -1;
  TensorLayout layout;
};
// The kernel view `spec` describes; `view_storage` as kernelView's.
at::Tensor kernelView(const KernelViewSpec& spec, c10::Storage view_storage = {});
// A CPU tensor aliasing host tensor `t`'s memory without owning it, for work queued on a stream.
at::Tensor hostAlias(const at::Tensor& t);
// Hands a view back once its kernel is done: a per-thread pool reuses its TensorImpl and StorageImpl,
// so running a small operator creates no host-side objects for its inputs.
void recycleKernelView(at::Tensor&& view);

// An allocator of device memory seen through the kernel mapping: its DataPtrs are CPU-typed and
// host-accessible. Host kernels that run on foo memory allocate their tensors with it.
c10::Allocator* kernelViewAllocator(c10::DeviceIndex device);
bool isKernelViewDataPtr(const c10::DataPtr& ptr);
// Turns a DataPtr from kernelViewAllocator into the owning device DataPtr of the same memory.
c10::DataPtr kernelViewToDevice(c10::DataPtr&& kernel_view, c10::DeviceIndex device);

// While it lives, this thread's CPU allocations come from `device`'s memory (kernel views).
class RedirectHostAllocations {
 public:
  explicit RedirectHostAllocations(c10::DeviceIndex device);
  ~RedirectHostAllocations();
  RedirectHostAllocations(const RedirectHostAllocations&) = delete;
  RedirectHostAllocations& operator=(const RedirectHostAllocations&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// The outputs a queued kernel is expected to produce, allocated by the host before it was queued. The
// first allocation of an output's exact size receives that output's memory, so a kernel that allocates
// its output first (as structured kernels do) writes its result in place; any other result is copied.
// A queued kernel's other allocations are host memory: device memory the host freed may still be
// waiting for work queued after this kernel, so the kernel must not take it.
struct OutputHint {
  void* data;
  size_t nbytes;
  bool taken = false;
};
using OutputHints = c10::SmallVector<OutputHint, 4>;

// Offers `hints` to this thread's allocations while it lives.
class OfferOutputHints {
 public:
  explicit OfferOutputHints(OutputHints& hints);
  ~OfferOutputHints();
  OfferOutputHints(const OfferOutputHints&) = delete;
  OfferOutputHints& operator=(const OfferOutputHints&) = delete;
};

}  // namespace foo
