#include "HostKernel.h"

#include <ATen/core/TensorBody.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstring>

#include "CachingAllocator.h"

namespace foo {
namespace {

thread_local c10::DeviceIndex t_redirect_device = -1;
c10::DeleterFnPtr g_host_raw_deleter = nullptr;

void rawDeleteEither(void* ptr) {
  if (fooDeviceAddress(ptr) != nullptr) {
    const int device = fooPointerGetDevice(fooDeviceAddress(ptr));
    kernelViewAllocator(static_cast<c10::DeviceIndex>(device))->raw_deleter()(ptr);
  } else {
    g_host_raw_deleter(ptr);
  }
}

// Installed as PyTorch's CPU allocator: outside a host kernel on foo memory it is the original CPU
// allocator; inside one, allocations come from the device's memory (kernel view).
class HostAllocatorRedirect final : public c10::Allocator {
 public:
  explicit HostAllocatorRedirect(c10::Allocator* host) : host_(host) { g_host_raw_deleter = host->raw_deleter(); }
  c10::DataPtr allocate(size_t nbytes) override {
    return t_redirect_device >= 0 ? kernelViewAllocator(t_redirect_device)->allocate(nbytes) : host_->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_host_raw_deleter ? &rawDeleteEither : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  c10::Allocator* host_;
};

const bool g_redirect_installed = [] {
  static HostAllocatorRedirect redirect(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&redirect, /*priority=*/1);
  return true;
}();

[[noreturn]] void raiseMixedDevices(const char* op, c10::Device a, c10::Device b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ", b,
              "! (when checking arguments for ", op, ")");
}

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
    if (free_.size() < kCapacity && view.use_count() == 1 && view.storage().use_count() == 1) {
      free_.push_back(std::move(view));
    }
  }

 private:
  static constexpr size_t kCapacity = 16;
  std::vector<at::Tensor> free_;
};

thread_local ViewPool t_view_pool;

}  // namespace

namespace {

// A CPU tensor with `t`'s metadata over `data`, which it does not own.
at::Tensor aliasView(const at::Tensor& t, void* data, c10::Allocator* allocator, c10::Storage view_storage) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  c10::DataPtr kernel_data(data, c10::Device(c10::kCPU));
  at::Tensor view = t_view_pool.take();
  if (!view.defined()) {
    if (!view_storage) {
      view_storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), storage->nbytes(), std::move(kernel_data), allocator,
          /*resizable=*/allocator != nullptr));
    }
    view = at::detail::make_tensor<c10::TensorImpl>(std::move(view_storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                    t.dtype());
  } else {
    c10::TensorImpl* view_impl = view.unsafeGetTensorImpl();
    if (!view_storage) {
      c10::StorageImpl* recycled = view_impl->storage().unsafeGetStorageImpl();
      recycled->set_data_ptr_noswap(std::move(kernel_data));
      recycled->set_nbytes(storage->nbytes());
      recycled->set_allocator(allocator);
      recycled->set_resizable(allocator != nullptr);
      view_storage = view_impl->storage();
    }
    view_impl->set_storage_and_dtype(std::move(view_storage), t.dtype());
  }
  c10::TensorImpl* view_impl = view.unsafeGetTensorImpl();
  view_impl->set_sizes_and_strides(impl->sizes(), impl->strides(), impl->storage_offset());
  view_impl->_set_conj(impl->is_conj());
  view_impl->_set_neg(impl->is_neg());
  return view;
}

}  // namespace

at::Tensor kernelView(const at::Tensor& t, c10::Storage view_storage) {
  // Resizable through the device's kernel-view allocator: an out= resize reallocates on the device.
  return aliasView(t, fooKernelAddress(t.storage().data()), kernelViewAllocator(t.device().index()),
                   std::move(view_storage));
}

at::Tensor hostAlias(const at::Tensor& t) { return aliasView(t, t.storage().mutable_data(), nullptr, {}); }

HostKernelCall::~HostKernelCall() {
  for (Alias& a : aliases_) t_view_pool.give(std::move(a.view));
}

HostKernelCall::RedirectHostAllocations::RedirectHostAllocations(c10::DeviceIndex device)
    : previous(t_redirect_device) {
  t_redirect_device = device;
}

HostKernelCall::RedirectHostAllocations::~RedirectHostAllocations() { t_redirect_device = previous; }

void HostKernelCall::joinDevice(c10::Device device) {
  if (device_ < 0) {
    device_ = device.index();
  } else if (device.index() != device_) {
    raiseMixedDevices(op_name_, fooDevice(device_), device);
  }
}

at::Tensor HostKernelCall::input(const at::Tensor& t) { return addInput(c10::MaybeOwned<at::Tensor>::borrowed(t)); }

at::Tensor HostKernelCall::input(at::Tensor&& t) { return addInput(c10::MaybeOwned<at::Tensor>::owned(std::move(t))); }

at::Tensor HostKernelCall::addInput(c10::MaybeOwned<at::Tensor> t) {
  joinDevice(t->device());
  c10::TensorImpl* impl = t->unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  c10::Storage view_storage;
  for (const Alias& a : aliases_) {
    if (a.foo->unsafeGetTensorImpl() == impl) return a.view;  // x.op_(x): one view, so overlap checks see it
    if (a.foo->storage().unsafeGetStorageImpl() == storage) view_storage = a.view.storage();
  }
  at::Tensor view = kernelView(*t, std::move(view_storage));
  c10::StorageImpl* view_storage_impl = view.storage().unsafeGetStorageImpl();
  aliases_.push_back({std::move(t), view, view_storage_impl});
  return view;
}

void HostKernelCall::hostInput(const at::Tensor& t, bool any_shape, bool mutated) {
  if (mutated || (!any_shape && t.dim() != 0)) host_conflict_ = t.device();
}

void HostKernelCall::targetDevice(c10::Device device) {
  checkDeviceIndex(device.has_index() ? device.index() : currentDevice());
  joinDevice(device.has_index() ? device : fooDevice(currentDevice()));
}

void HostKernelCall::prepare() {
  if (device_ < 0) device_ = currentDevice();
  if (host_conflict_) raiseMixedDevices(op_name_, fooDevice(device_), *host_conflict_);
}

at::Tensor HostKernelCall::wrap(c10::Storage storage, const at::Tensor& like) const {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) impl->_set_conj(true);
  if (like.is_neg()) impl->_set_neg(true);
  return t;
}

c10::Storage HostKernelCall::fooStorageFor(const c10::Storage& kernel_storage) {
  c10::StorageImpl* impl = kernel_storage.unsafeGetStorageImpl();
  if (impl->device_type() == c10::DeviceType::PrivateUse1) return kernel_storage;  // adopted by an earlier result
  for (const Alias& a : aliases_)
    if (a.view_storage == impl) return a.foo->storage();
  if (isKernelViewDataPtr(impl->data_ptr())) {
    // Born on the device during the kernel: the storage itself becomes a foo storage, no copy.
    impl->set_data_ptr_noswap(kernelViewToDevice(impl->set_data_ptr(c10::DataPtr()), device_));
    impl->set_allocator(&cachingAllocator());
    return kernel_storage;
  }
  // Host memory the kernel did not allocate through us (a CPU scalar argument it returned, say). A
  // storage without data (a ZeroTensor's) stays without data.
  const bool has_data = impl->data_ptr().get() != nullptr;
  c10::DataPtr device_ptr =
      has_data ? cachingAllocator().allocateOn(device_, impl->nbytes()) : c10::DataPtr(nullptr, fooDevice(device_));
  if (has_data && impl->nbytes() > 0) {
    void* dest = fooKernelAddress(device_ptr.get());
    const void* src = impl->data_ptr().get();
    const size_t n = impl->nbytes();
    launchKernel(device_, [&] { std::memcpy(dest, src, n); });
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), impl->nbytes(),
                                                            std::move(device_ptr), &cachingAllocator(),
                                                            /*resizable=*/true));
}

void HostKernelCall::syncArguments() {
  for (Alias& a : aliases_) {
    c10::TensorImpl* view = a.view.unsafeGetTensorImpl();
    c10::TensorImpl* foo_impl = a.foo->unsafeGetTensorImpl();
    c10::StorageImpl* view_storage = view->storage().unsafeGetStorageImpl();
    if (view_storage != a.view_storage) {
      foo_impl->set_storage_keep_dtype(fooStorageFor(view->storage()));
    } else if (isKernelViewDataPtr(view_storage->data_ptr())) {
      // The kernel resized the argument: its storage was reallocated on the device.
      c10::StorageImpl* foo_storage = foo_impl->storage().unsafeGetStorageImpl();
      void* kernel = view_storage->data_ptr().get();
      foo_storage->set_data_ptr_noswap(
          kernelViewToDevice(view_storage->set_data_ptr(c10::DataPtr(kernel, c10::Device(c10::kCPU))), device_));
      foo_storage->set_nbytes(view_storage->nbytes());
    }
    if (view->sizes() != foo_impl->sizes() || view->strides() != foo_impl->strides() ||
        view->storage_offset() != foo_impl->storage_offset()) {
      foo_impl->set_sizes_and_strides(view->sizes(), view->strides(), view->storage_offset());
    }
    if (view->is_conj() != foo_impl->is_conj()) foo_impl->_set_conj(view->is_conj());
    if (view->is_neg() != foo_impl->is_neg()) foo_impl->_set_neg(view->is_neg());
  }
}

at::Tensor HostKernelCall::output(at::Tensor result) {
  if (!result.defined()) return result;
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  for (const Alias& a : aliases_)
    if (a.view.unsafeGetTensorImpl() == impl) return *a.foo;
  TORCH_CHECK(result.layout() == c10::kStrided, op_name_, ": foo supports strided tensors only, the kernel returned ",
              result.layout());
  c10::Storage storage = fooStorageFor(result.storage());
  if (result.use_count() == 1) {
    // Nobody else holds the kernel's result: it becomes the foo tensor itself.
    impl->set_storage_keep_dtype(std::move(storage));
    impl->_change_backend_component_keys(fooDevice(device_));
    return result;
  }
  return wrap(std::move(storage), result);
}

}  // namespace foo
