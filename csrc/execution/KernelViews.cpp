#include "execution/KernelViews.h"

#include <ATen/core/TensorBody.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "device/CachingAllocator.h"
#include "device/Common.h"

namespace foo {
namespace {

// ---- The kernel-view allocator: device memory from the caching allocator, seen through the kernel mapping

void freeKernelView(void* kernel) { cachingAllocator().raw_deleter()(fooDeviceAddress(kernel)); }

class KernelViewAllocator final : public c10::Allocator {
 public:
  explicit KernelViewAllocator(c10::DeviceIndex device) : device_(device) {}
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr device_memory = cachingAllocator().allocateOn(device_, nbytes);
    if (device_memory.get() == nullptr) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    void* kernel = fooKernelAddress(device_memory.get());
    device_memory.release_context();  // owned by the kernel-view DataPtr from now on
    return c10::DataPtr(kernel, kernel, &freeKernelView, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &freeKernelView; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  const c10::DeviceIndex device_;
};

// ---- The CPU allocator redirect, and output hints


thread_local c10::DeviceIndex t_redirect_device = -1;
c10::DeleterFnPtr g_host_raw_deleter = nullptr;

// Output hints offered to this thread's allocations (see OfferOutputHints).
thread_local OutputHints* t_output_hints = nullptr;

void keepOutput(void*) {}  // an output's memory belongs to its foo storage

c10::DataPtr takeOutputHint(size_t nbytes) {
  for (OutputHint& hint : *t_output_hints) {
    if (!hint.taken && hint.nbytes == nbytes) {
      hint.taken = true;
      return c10::DataPtr(hint.data, hint.data, &keepOutput, c10::Device(c10::kCPU));
    }
  }
  return c10::DataPtr();
}

bool isOutputHint(void* ptr) {
  if (t_output_hints == nullptr) return false;
  for (const OutputHint& hint : *t_output_hints)
    if (hint.data == ptr) return true;
  return false;
}

void rawDeleteEither(void* ptr) {
  if (isOutputHint(ptr)) return;
  if (fooDeviceAddress(ptr) != nullptr) {
    freeKernelView(ptr);  // the raw deleter of every device's kernel-view allocator
  } else {
    g_host_raw_deleter(ptr);
  }
}

// Installed as PyTorch's CPU allocator: outside a host kernel on foo memory it is the original CPU
// allocator; inside one, allocations come from the device's memory (kernel view).
class CpuAllocatorRedirect final : public c10::Allocator {
 public:
  explicit CpuAllocatorRedirect(c10::Allocator* host) : host_(host) { g_host_raw_deleter = host->raw_deleter(); }
  c10::DataPtr allocate(size_t nbytes) override {
    if (t_output_hints != nullptr) {
      if (c10::DataPtr hinted = takeOutputHint(nbytes)) return hinted;
    }
    return t_redirect_device >= 0 ? kernelViewAllocator(t_redirect_device)->allocate(nbytes) : host_->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_host_raw_deleter ? &rawDeleteEither : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  c10::Allocator* host_;
};

const bool g_redirect_installed = [] {
  static CpuAllocatorRedirect redirect(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&redirect, /*priority=*/1);
  return true;
}();


// Kernel views live for one kernel. A per-thread pool recycles their CPU TensorImpl and StorageImpl
// once nothing else holds them, so running a small op creates no host-side objects for its inputs.
class ViewPool {
 public:
  at::Tensor take() {
    if (free_.empty()) return {};
    at::Tensor view = std::move(free_.back());
    free_.pop_back();
    return view;
  }
  void give(at::Tensor&& view) {
    if (free_.size() < kCapacity && view.defined() && !view.is_nested() && view.use_count() == 1 &&
        view.storage().use_count() == 1) {
      free_.push_back(std::move(view));
    }
  }

 private:
  static constexpr size_t kCapacity = 64;  // the views of the launches in flight come back in batches
  std::vector<at::Tensor> free_;
};

thread_local ViewPool t_view_pool;

// A CPU tensor with `layout` over `data`, which it does not own.
at::Tensor aliasView(const TensorLayout& layout, void* data, c10::Allocator* allocator, c10::Storage view_storage) {
  c10::DataPtr kernel_data(data, c10::Device(c10::kCPU));
  at::Tensor view = t_view_pool.take();
  if (!view.defined()) {
    if (!view_storage) {
      view_storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), layout.storage_nbytes, std::move(kernel_data), allocator,
          /*resizable=*/allocator != nullptr));
    }
    view = at::detail::make_tensor<c10::TensorImpl>(std::move(view_storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                    layout.dtype);
  } else {
    c10::TensorImpl* view_impl = view.unsafeGetTensorImpl();
    if (!view_storage) {
      c10::StorageImpl* recycled = view_impl->storage().unsafeGetStorageImpl();
      recycled->set_data_ptr_noswap(std::move(kernel_data));
      recycled->set_nbytes(layout.storage_nbytes);
      recycled->set_allocator(allocator);
      recycled->set_resizable(allocator != nullptr);
      view_storage = view_impl->storage();
    }
    view_impl->set_storage_and_dtype(std::move(view_storage), layout.dtype);
  }
  layout.applyTo(view.unsafeGetTensorImpl());
  return view;
}

}  // namespace

KernelViewSpec::KernelViewSpec(const at::Tensor& foo_tensor)
    : data(fooKernelAddress(foo_tensor.unsafeGetTensorImpl()->unsafe_storage().data())),
      device(foo_tensor.device().index()),
      layout(foo_tensor) {}

at::Tensor kernelView(const KernelViewSpec& spec, c10::Storage view_storage) {
  return aliasView(spec.layout, spec.data, kernelViewAllocator(spec.device), std::move(view_storage));
}

at::Tensor kernelView(const at::Tensor& t, c10::Storage view_storage) {
  // Resizable through the device's kernel-view allocator: an out= resize reallocates on the device.
  return aliasView(TensorLayout(t), fooKernelAddress(t.storage().data()), kernelViewAllocator(t.device().index()),
                   std::move(view_storage));
}

at::Tensor hostAlias(const at::Tensor& t) { return aliasView(TensorLayout(t), t.storage().mutable_data(), nullptr, {}); }

void recycleKernelView(at::Tensor&& view) { t_view_pool.give(std::move(view)); }

RedirectHostAllocations::RedirectHostAllocations(c10::DeviceIndex device) : previous_(t_redirect_device) {
  t_redirect_device = device;
}

RedirectHostAllocations::~RedirectHostAllocations() { t_redirect_device = previous_; }

OfferOutputHints::OfferOutputHints(OutputHints& hints) { t_output_hints = &hints; }

OfferOutputHints::~OfferOutputHints() { t_output_hints = nullptr; }

c10::Allocator* kernelViewAllocator(c10::DeviceIndex device) {
  static const auto allocators = perDevice([](c10::DeviceIndex d) { return std::make_unique<KernelViewAllocator>(d); });
  return allocators[static_cast<size_t>(device)].get();
}

bool isKernelViewDataPtr(const c10::DataPtr& ptr) { return ptr.get_deleter() == &freeKernelView; }

c10::DataPtr kernelViewToDevice(c10::DataPtr&& kernel_view, c10::DeviceIndex device) {
  void* kernel = kernel_view.get();
  if (kernel == nullptr) return c10::DataPtr(nullptr, fooDevice(device));
  kernel_view.release_context();  // ownership moves to the device DataPtr
  return cachingAllocator().ownedDataPtr(fooDeviceAddress(kernel), device);
}

}  // namespace foo
