#include "execution/HostKernel.h"

#include <ATen/EmptyTensor.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/core/TensorBody.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstring>

#include "device/CachingAllocator.h"
#include "execution/KernelViews.h"

namespace foo {

HostKernelCall::~HostKernelCall() {
  sparse_aliases_.clear();  // they hold their components' views, which could not be recycled
  for (Alias& a : aliases_)
    if (a.view.defined() && !a.view.requires_grad()) recycleKernelView(std::move(a.view));  // see markViewsRequiringGrad
}

void HostKernelCall::joinDevice(c10::Device device) {
  if (device_ < 0) {
    device_ = device.index();
  } else if (device.index() != device_ && !device_conflict_) {
    device_conflict_ = device;  // raised when the call runs, after the checks CUDA makes first (Fallback.cpp)
  }
}

at::Tensor HostKernelCall::argument(const at::Tensor& t, TensorUse use) {
  return addArgument(c10::MaybeOwned<at::Tensor>::borrowed(t), use);
}

at::Tensor HostKernelCall::argument(at::Tensor&& t, TensorUse use) {
  return addArgument(c10::MaybeOwned<at::Tensor>::owned(std::move(t)), use);
}

at::Tensor HostKernelCall::addArgument(c10::MaybeOwned<at::Tensor> t, TensorUse use) {
  if (!t->defined()) {
    signature_.undefinedTensor();
    return *t;
  }
  if (isFoo(*t)) return addInput(std::move(t));
  return hostInput(*t, use);
}

at::Tensor HostKernelCall::addInput(c10::MaybeOwned<at::Tensor> t) {
  joinDevice(t->device());
  if (t->is_nested()) {
    // A CPU nested tensor over the kernel view of the buffer. Nested tensors' shapes are values of
    // their metadata tensors: such calls always run synchronously.
    signature_.forbid();
    const at::native::NestedTensorImpl& nested = *at::native::get_nested_tensor_impl(*t);
    at::Tensor view = at::detail::make_tensor<at::native::NestedTensorImpl>(
        kernelView(nested.get_unsafe_storage_as_tensor()), nested.get_nested_sizes(), nested.get_nested_strides(),
        nested.get_storage_offsets());
    c10::StorageImpl* view_storage_impl = view.storage().unsafeGetStorageImpl();
    aliases_.push_back({std::move(t), view, view_storage_impl, aliases_.size()});
    return view;
  }
  if (t->layout() != c10::kStrided) return addSparseInput(std::move(t));
  return viewOf(addStridedInput(std::move(t)));
}

size_t HostKernelCall::addStridedInput(c10::MaybeOwned<at::Tensor> t) {
  c10::TensorImpl* impl = t->unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  size_t storage_slot = aliases_.size();
  for (size_t slot = 0; slot < aliases_.size(); ++slot) {
    const Alias& a = aliases_[slot];
    if (a.foo->unsafeGetTensorImpl() == impl) {  // x.op_(x): one view, so overlap checks see it
      signature_.tensor(*a.foo, slot, slot);
      return slot;
    }
    if (storage_slot == aliases_.size() && a.foo->storage().unsafeGetStorageImpl() == storage) storage_slot = slot;
  }
  signature_.tensor(*t, aliases_.size(), storage_slot);
  aliases_.push_back({std::move(t), at::Tensor(), nullptr, storage_slot});
  return aliases_.size() - 1;
}

const at::Tensor& HostKernelCall::viewOf(size_t slot) {
  Alias& a = aliases_[slot];
  if (!a.view.defined()) {
    // Views of one storage share their view's storage, so that the kernel's overlap checks see them alias.
    c10::Storage view_storage = a.storage_slot < slot ? viewOf(a.storage_slot).storage() : c10::Storage();
    a.view = kernelView(*a.foo, std::move(view_storage));
    a.view_storage = a.view.storage().unsafeGetStorageImpl();
  }
  return a.view;
}

void HostKernelCall::declare(const at::Tensor& t, TensorUse use) {
  if (t.defined() && isFoo(t) && t.layout() == c10::kStrided && !t.is_nested()) {
    joinDevice(t.device());
    addStridedInput(c10::MaybeOwned<at::Tensor>::borrowed(t));
  } else if (t.defined() && !isFoo(t)) {
    signHostInput(t, use);
  } else {
    argument(t, use);  // its view (nested and other layouts) is made now
  }
}

at::Tensor HostKernelCall::kernelArgument(const at::Tensor& t, TensorUse use, bool queued) {
  if (!t.defined()) return t;
  if (!isFoo(t)) return hostValue(t, use);
  const int slot = slotOf(t);
  TORCH_INTERNAL_ASSERT(slot >= 0, op_name_, ": kernelArgument() of a foo tensor that was never declared");
  return queued ? at::Tensor() : viewOf(static_cast<size_t>(slot));
}

int HostKernelCall::slotOf(const at::Tensor& t) const {
  if (!t.defined() || !isFoo(t)) return -1;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (size_t slot = 0; slot < aliases_.size(); ++slot)
    if (aliases_[slot].foo->unsafeGetTensorImpl() == impl) return static_cast<int>(slot);
  return -1;
}

at::Tensor HostKernelCall::hostInput(const at::Tensor& t, TensorUse use) {
  signHostInput(t, use);
  return hostValue(t, use);
}

void HostKernelCall::signHostInput(const at::Tensor& t, TensorUse use) {
  const bool mutated = use == TensorUse::kMutated;
  if (mutated || (use != TensorUse::kIndices && t.dim() != 0)) host_conflict_ = t.device();
  if (mutated || t.dim() != 0 || t.device().type() != c10::kCPU) {
    signature_.forbid();  // a queued kernel would read host memory the caller may change meanwhile
  } else {
    signature_.hostScalar(t.scalar_type(), t.unsafeGetTensorImpl()->is_wrapped_number());
  }
}

at::Tensor HostKernelCall::hostValue(const at::Tensor& t, TensorUse use) {
  // A 0-dim CPU tensor read is passed by value: a wrapped number belongs to this call alone, another is copied.
  const bool scalar = use != TensorUse::kMutated && t.dim() == 0 && t.device().type() == c10::kCPU;
  return scalar && !t.unsafeGetTensorImpl()->is_wrapped_number() ? t.clone() : t;
}

void HostKernelCall::targetDevice(c10::Device device) {
  checkDeviceIndex(device.has_index() ? device.index() : currentDevice());
  joinDevice(device.has_index() ? device : fooDevice(currentDevice()));
  signature_.add(static_cast<int64_t>(device_));
}

void HostKernelCall::prepare() {
  if (device_ < 0) device_ = currentDevice();
  if (device_conflict_) raiseMixedDevices(op_name_, fooDevice(device_), *device_conflict_);
  if (host_conflict_) raiseMixedDevices(op_name_, fooDevice(device_), *host_conflict_);
}

bool HostKernelCall::mayQueue() {
  prepare();
  // Dispatch state the queued kernel could not see as the caller does (Python modes, CPU autocast)
  // keeps the call synchronous.
  static const c10::DispatchKeySet kAlwaysIncluded{c10::DispatchKey::BackendSelect, c10::DispatchKey::ADInplaceOrView};
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return signature_.allowed() && (tls.included_ - kAlwaysIncluded).empty() &&
         tls.excluded_.has(c10::DispatchKey::AutocastCPU);
}

std::shared_ptr<LaunchPlan> HostKernelCall::plan() { return mayQueue() ? findLaunchPlan(signature_) : nullptr; }

bool HostKernelCall::mayPlanFromMeta() {
  if (!mayQueue() || !sparse_aliases_.empty()) return false;
  for (size_t slot = 0; slot < aliases_.size(); ++slot) {
    const at::Tensor& t = *aliases_[slot].foo;
    if (aliases_[slot].storage_slot != slot || t.is_conj() || t.is_neg()) return false;
  }
  return true;
}

bool HostKernelCall::capturing() {
  prepare();
  int capturing = 0;
  FOO_CHECK(fooStreamIsCapturing(device_, currentStream(device_), &capturing));
  return capturing != 0;
}

std::shared_ptr<LaunchPlan> HostKernelCall::planFromMeta(KernelKey key,
                                                         c10::function_ref<bool(std::vector<at::Tensor>&)> meta,
                                                         std::vector<int> structure,
                                                         std::optional<KernelKey>& first_use) {
  if (!kernelRan(key) && !capturing()) {
    first_use = std::move(key);
    return nullptr;
  }
  std::vector<at::Tensor> outputs;
  {
    struct DiscardWarnings final : c10::WarningHandler {
      void process(const c10::Warning&) override {}
    } discard;
    c10::WarningUtils::WarningHandlerGuard no_warnings(&discard);
    try {
      if (!meta(outputs)) return nullptr;
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  auto plan = std::make_shared<LaunchPlan>();
  plan->kernel_name = kernelName();
  for (const at::Tensor& output : outputs) plan->outputs.push_back({LaunchPlan::Output::kFresh, 0, TensorLayout(output)});
  plan->structure = std::move(structure);
  rememberLaunchPlan(signature_, plan);
  return plan;
}

at::Tensor HostKernelCall::metaOf(const at::Tensor& argument) const {
  for (const Alias& a : aliases_)
    if (a.view.defined() && a.view.unsafeGetTensorImpl() == argument.unsafeGetTensorImpl()) return metaLike(argument);
  return argument;
}

at::Tensor metaLike(const at::Tensor& t) {
  return at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type(), std::nullopt, std::nullopt,
                                        std::nullopt);
}

void HostKernelCall::learn(const std::vector<at::Tensor>& results, std::vector<int> structure, bool arguments_changed) {
  if (!signature_.allowed() || arguments_changed) return;
  auto plan = std::make_shared<LaunchPlan>();
  plan->kernel_name = kernelName();
  std::vector<const c10::StorageImpl*> fresh_storages;
  for (const at::Tensor& r : results) {
    LaunchPlan::Output spec{LaunchPlan::Output::kUndefined};
    if (r.defined()) {
      const c10::TensorImpl* impl = r.unsafeGetTensorImpl();
      for (size_t slot = 0; slot < aliases_.size() && spec.kind == LaunchPlan::Output::kUndefined; ++slot) {
        if (aliases_[slot].view.unsafeGetTensorImpl() == impl) {
          spec.kind = LaunchPlan::Output::kArgument;
          spec.argument = slot;
        }
      }
      if (spec.kind == LaunchPlan::Output::kUndefined) {
        // Only memory the kernel allocated itself, one storage per output, can be allocated in advance.
        // Sparse results have no storage (before storage() would throw); sparse and nested results' shapes
        // depend on values.
        if (r.layout() != c10::kStrided || r.is_nested()) return;
        const c10::StorageImpl* storage = r.storage().unsafeGetStorageImpl();
        // An empty output has no memory (a storage of 0 bytes, with or without an address).
        const bool memoryless = storage->nbytes() == 0;
        if (!(memoryless || isKernelViewDataPtr(storage->data_ptr())) ||
            std::find(fresh_storages.begin(), fresh_storages.end(), storage) != fresh_storages.end()) {
          return;
        }
        fresh_storages.push_back(storage);
        spec.kind = LaunchPlan::Output::kFresh;
        spec.layout = TensorLayout(r);
      }
    }
    plan->outputs.push_back(std::move(spec));
  }
  plan->structure = std::move(structure);
  rememberLaunchPlan(signature_, std::move(plan));
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
    runAfterStream(device_, "Memcpy HtoD (Pageable -> Device)", [&] { std::memcpy(dest, src, n); }, fooActivityKindMemcpy);
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), impl->nbytes(),
                                                            std::move(device_ptr), &cachingAllocator(),
                                                            /*resizable=*/true));
}

bool HostKernelCall::syncArguments() {
  bool changed = false;
  for (Alias& a : aliases_) {
    if (!a.view.defined()) continue;  // the kernel never received it
    c10::TensorImpl* view = a.view.unsafeGetTensorImpl();
    c10::TensorImpl* foo_impl = a.foo->unsafeGetTensorImpl();
    if (view->is_nested()) continue;  // nested kernels change values only, never metadata
    c10::StorageImpl* view_storage = view->storage().unsafeGetStorageImpl();
    if (view_storage != a.view_storage) {
      foo_impl->set_storage_keep_dtype(fooStorageFor(view->storage()));
      changed = true;
    } else if (isKernelViewDataPtr(view_storage->data_ptr())) {
      changed = true;
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
      changed = true;
    }
    if (view->is_conj() != foo_impl->is_conj() || view->is_neg() != foo_impl->is_neg()) {
      foo_impl->_set_conj(view->is_conj());
      foo_impl->_set_neg(view->is_neg());
      changed = true;
    }
  }
  for (SparseAlias& s : sparse_aliases_) changed |= syncSparseArgument(s);
  return changed;
}

at::Tensor HostKernelCall::output(at::Tensor result) {
  if (!result.defined()) return result;
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  for (const Alias& a : aliases_)
    if (a.view.unsafeGetTensorImpl() == impl) return *a.foo;
  if (result.is_nested()) {
    // The buffer becomes a foo tensor; the metadata tensors are copied out of device memory, where the
    // kernel allocated them, since they belong to the host.
    const at::native::NestedTensorImpl& nested = *at::native::get_nested_tensor_impl(result);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(output(nested.get_unsafe_storage_as_tensor()),
                                                         nested.get_nested_sizes().clone(),
                                                         nested.get_nested_strides().clone(),
                                                         nested.get_storage_offsets().clone());
  }
  if (result.layout() != c10::kStrided) return sparseOutput(result);
  c10::Storage storage = fooStorageFor(result.storage());
  if (result.use_count() == 1) {
    // Nobody else holds the kernel's result: it becomes the foo tensor itself.
    impl->set_storage_keep_dtype(std::move(storage));
    impl->_change_backend_component_keys(fooDevice(device_));
    return result;
  }
  return TensorLayout(result).fooTensor(std::move(storage));
}

}  // namespace foo
