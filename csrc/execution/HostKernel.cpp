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
#include <exception>

#include "device/CachingAllocator.h"
#include "execution/KernelViews.h"

namespace foo {

HostKernelCall::~HostKernelCall() {
  // A call that raised at the call was not launched: no device-side failure follows it.
  if (C10_UNLIKELY(launchFailureArmed()) && std::uncaught_exceptions() == 0) {
    try {
      failInjectedLaunch(device_ >= 0 ? device_ : currentDevice(), op_name_);
    } catch (const std::exception&) {
      // The runtime refused to queue it: a destructor must not throw, and the failure is dropped.
    }
  }
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
  if (isFoo(*t)) return addInput(std::move(t), use);
  return hostInput(*t, use);
}

at::Tensor HostKernelCall::addInput(c10::MaybeOwned<at::Tensor> t, TensorUse use) {
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
  return viewOf(addStridedInput(std::move(t), use));
}

size_t HostKernelCall::addStridedInput(c10::MaybeOwned<at::Tensor> t, TensorUse use) {
  c10::TensorImpl* impl = t->unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  size_t storage_slot = aliases_.size();
  for (size_t slot = 0; slot < aliases_.size(); ++slot) {
    const Alias& a = aliases_[slot];
    if (a.foo->unsafeGetTensorImpl() == impl) {  // x.op_(x): one view, so overlap checks see it
      signature_.tensor(*a.foo, slot, slot);
      aliases_[slot].written |= use == TensorUse::kMutated;
      return slot;
    }
    if (storage_slot == aliases_.size() && a.foo->storage().unsafeGetStorageImpl() == storage) storage_slot = slot;
  }
  signature_.tensor(*t, aliases_.size(), storage_slot);
  aliases_.push_back({std::move(t), at::Tensor(), nullptr, storage_slot});
  aliases_.back().written = use == TensorUse::kMutated;
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
    addStridedInput(c10::MaybeOwned<at::Tensor>::borrowed(t), use);
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
    cuda_waits_ = true;   // CUDA copies it from pageable memory, waiting
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

void HostKernelCall::sanitizeArguments() {
  sanitizer::LaunchAccesses& accesses = sanitized();
  for (const Alias& a : aliases_) accesses.add(*a.foo, a.written);
  accesses.check(device_, op_name_);
}

sanitizer::LaunchAccesses& HostKernelCall::sanitized() {
  if (!sanitized_) sanitized_ = std::make_unique<sanitizer::LaunchAccesses>();
  return *sanitized_;
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
    const Alias& a = aliases_[slot];
    if (a.foo->is_conj() || a.foo->is_neg()) return false;
    // Memory written through one argument and reached through another (a meta function sees no overlap
    // between separate meta tensors); arguments that are only read may share it.
    const Alias& first = aliases_[a.storage_slot];
    if (a.storage_slot != slot && (a.written || first.written)) return false;
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
                                                         std::optional<FirstUse>& first_use) {
  std::vector<at::Tensor> outputs;
  bool planned = false;
  {
    struct DiscardWarnings final : c10::WarningHandler {
      void process(const c10::Warning&) override {}
    } discard;
    c10::WarningUtils::WarningHandlerGuard no_warnings(&discard);
    try {
      planned = meta(outputs);
    } catch (const std::exception&) {
    }
  }
  std::vector<LaunchPlan::Resize> resized;
  for (size_t slot = 0; slot < aliases_.size(); ++slot) {
    // An argument the meta function resized: an empty out= without memory is planned as the kernel would
    // resize it; any other is learnt by running.
    const Alias& a = aliases_[slot];
    const c10::TensorImpl* foo = a.foo->unsafeGetTensorImpl();
    if (!a.meta.defined() || (a.meta.sizes() == foo->sizes() && a.meta.strides() == foo->strides())) continue;
    const bool had_no_memory = foo->numel() == 0 && foo->unsafe_storage().nbytes() == 0 && foo->storage_offset() == 0;
    if (resizePlannable(slot, had_no_memory)) {
      resized.push_back({slot, TensorLayout(a.meta)});
    } else {
      planned = false;
    }
  }
  for (const at::Tensor& output : outputs) {
    // Only strided outputs are allocated in advance (a sparse gradient's shape depends on values).
    if (output.defined() && (output.layout() != c10::kStrided || output.is_nested())) planned = false;
  }
  std::shared_ptr<LaunchPlan> plan;
  if (planned) {
    plan = std::make_shared<LaunchPlan>();
    plan->resized = std::move(resized);
    plan->kernel_name = kernelName();
    plan->from_meta = true;
    for (const at::Tensor& output : outputs) {
      if (!output.defined()) {
        plan->outputs.push_back({LaunchPlan::Output::kUndefined});
        continue;
      }
      LaunchPlan::Output spec{LaunchPlan::Output::kFresh, 0, TensorLayout(output)};
      for (size_t slot = 0; slot < aliases_.size(); ++slot) {
        if (aliases_[slot].meta.defined() && aliases_[slot].meta.unsafeGetTensorImpl() == output.unsafeGetTensorImpl()) {
          spec = {LaunchPlan::Output::kArgument, slot, {}};
        }
      }
      plan->outputs.push_back(std::move(spec));
    }
    plan->structure = std::move(structure);
  }
  if (!kernelRan(key) && !capturing()) {
    first_use.emplace(FirstUse{std::move(key), std::move(plan)});
    return nullptr;
  }
  return plan && rememberLaunchPlan(signature_, plan) ? plan : nullptr;
}

namespace {

// Whether a kernel's result can be allocated in advance: memory the kernel allocated itself, one storage per
// output (`fresh_storages`, which it joins). Sparse results have no storage (before storage() would throw);
// sparse and nested results' shapes depend on values.
bool isFreshResult(const at::Tensor& result, std::vector<const c10::StorageImpl*>& fresh_storages) {
  if (result.layout() != c10::kStrided || result.is_nested()) return false;
  const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
  // An empty output has no memory (a storage of 0 bytes, with or without an address).
  if (!(storage->nbytes() == 0 || isKernelViewDataPtr(storage->data_ptr())) ||
      std::find(fresh_storages.begin(), fresh_storages.end(), storage) != fresh_storages.end()) {
    return false;
  }
  fresh_storages.push_back(storage);
  return true;
}

}  // namespace

void HostKernelCall::noteFirstUse(const FirstUse& first_use, const std::vector<at::Tensor>& results) const {
  const LaunchPlan* plan = first_use.meta_plan.get();
  if (plan == nullptr || plan->outputs.size() != results.size()) return;
  for (const LaunchPlan::Resize& resize : plan->resized) {
    const at::Tensor& argument = *aliases_[resize.argument].foo;
    if (!resize.layout.describes(argument) || argument.storage().nbytes() != resize.layout.storage_nbytes) return;
  }
  std::vector<const c10::StorageImpl*> fresh_storages;
  for (size_t i = 0; i < results.size(); ++i) {
    const LaunchPlan::Output& spec = plan->outputs[i];
    const at::Tensor& result = results[i];
    if (spec.kind == LaunchPlan::Output::kUndefined && result.defined()) return;
    if (spec.kind != LaunchPlan::Output::kFresh) continue;
    // A fresh output of the layout planned (not a view of an argument, which a queued launch would copy).
    if (!result.defined() || !isFreshResult(result, fresh_storages) || !spec.layout.describes(result)) return;
  }
  noteKernelRan(first_use.key);
}

at::Tensor* HostKernelCall::argumentMeta(const at::Tensor& argument) {
  const c10::TensorImpl* impl = argument.unsafeGetTensorImpl();
  for (Alias& a : aliases_) {
    if (a.foo->unsafeGetTensorImpl() == impl || (a.view.defined() && a.view.unsafeGetTensorImpl() == impl)) {
      if (!a.meta.defined()) a.meta = metaLike(argument);
      return &a.meta;
    }
  }
  return nullptr;
}

at::Tensor HostKernelCall::metaOf(const at::Tensor& argument) {
  at::Tensor* meta = argumentMeta(argument);
  return meta != nullptr ? *meta : argument;
}

at::Tensor& HostKernelCall::writtenMetaOf(const at::Tensor& argument) {
  at::Tensor* meta = argumentMeta(argument);
  TORCH_INTERNAL_ASSERT(meta != nullptr, op_name_, ": a written argument that is not a foo tensor");
  return *meta;
}

at::Tensor metaLike(const at::Tensor& t) {
  return at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type(), std::nullopt, std::nullopt,
                                        std::nullopt);
}

void HostKernelCall::learn(const std::vector<at::Tensor>& results, std::vector<int> structure) {
  if (!signature_.allowed() || unplannable_changes_) return;
  auto plan = std::make_shared<LaunchPlan>();
  plan->kernel_name = kernelName();
  for (size_t slot = 0; slot < aliases_.size(); ++slot)
    if (aliases_[slot].resized) plan->resized.push_back({slot, TensorLayout(*aliases_[slot].foo)});
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
        if (!isFreshResult(r, fresh_storages)) return;
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
    if (sanitizer::enabled()) recordWritten(kernel_storage);
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
    runAfterStream(device_, "Memcpy HtoD (Pageable -> Device)", [&] { std::memcpy(dest, src, n); }, fooActivityKindMemcpy,
                   cuda_waits_ ? HostWait::kAsOnCuda : HostWait::kFooOnly);
  }
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), impl->nbytes(),
                                                             std::move(device_ptr), &cachingAllocator(),
                                                             /*resizable=*/true));
  if (sanitizer::enabled()) recordWritten(storage);
  return storage;
}

void HostKernelCall::recordWritten(const c10::Storage& storage) {
  sanitizer::LaunchAccesses& accesses = sanitized();
  accesses.bytes(storage.data(), storage.nbytes(), /*written=*/true);
  accesses.record(device_, op_name_);
}

void HostKernelCall::syncArguments() {
  for (size_t slot = 0; slot < aliases_.size(); ++slot) {
    Alias& a = aliases_[slot];
    if (!a.view.defined()) continue;  // the kernel never received it
    c10::TensorImpl* view = a.view.unsafeGetTensorImpl();
    c10::TensorImpl* foo_impl = a.foo->unsafeGetTensorImpl();
    if (view->is_nested()) continue;  // nested kernels change values only, never metadata
    c10::StorageImpl* foo_storage = foo_impl->storage().unsafeGetStorageImpl();
    const bool had_no_memory =
        foo_impl->numel() == 0 && foo_storage->nbytes() == 0 && foo_impl->storage_offset() == 0;
    bool changed = false, not_a_resize = false;
    c10::StorageImpl* view_storage = view->storage().unsafeGetStorageImpl();
    if (view_storage != a.view_storage) {
      foo_impl->set_storage_keep_dtype(fooStorageFor(view->storage()));
      changed = not_a_resize = true;
    } else if (isKernelViewDataPtr(view_storage->data_ptr())) {
      changed = true;
      // The kernel resized the argument: its storage was reallocated on the device.
      void* kernel = view_storage->data_ptr().get();
      foo_storage->set_data_ptr_noswap(
          kernelViewToDevice(view_storage->set_data_ptr(c10::DataPtr(kernel, c10::Device(c10::kCPU))), device_));
      foo_storage->set_nbytes(view_storage->nbytes());
      if (sanitizer::enabled()) recordWritten(foo_impl->storage());
    }
    if (view->sizes() != foo_impl->sizes() || view->strides() != foo_impl->strides() ||
        view->storage_offset() != foo_impl->storage_offset()) {
      foo_impl->set_sizes_and_strides(view->sizes(), view->strides(), view->storage_offset());
      changed = true;
    }
    if (view->is_conj() != foo_impl->is_conj() || view->is_neg() != foo_impl->is_neg()) {
      foo_impl->_set_conj(view->is_conj());
      foo_impl->_set_neg(view->is_neg());
      changed = not_a_resize = true;
    }
    if (!changed) continue;
    if (!not_a_resize && resizePlannable(slot, had_no_memory)) {
      a.resized = true;
    } else {
      unplannable_changes_ = true;
    }
  }
  for (SparseAlias& s : sparse_aliases_) unplannable_changes_ |= syncSparseArgument(s);
}

bool HostKernelCall::resizePlannable(size_t slot, bool had_no_memory) const {
  if (!had_no_memory || aliases_[slot].storage_slot != slot) return false;
  for (size_t other = slot + 1; other < aliases_.size(); ++other)
    if (aliases_[other].storage_slot == slot) return false;
  return true;
}

void HostKernelCall::resizeAsPlanned(size_t slot, const TensorLayout& resize) {
  Alias& a = aliases_[slot];
  c10::TensorImpl* impl = a.foo->unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  const size_t nbytes = resize.storage_nbytes;
  if (nbytes > 0) {
    storage->set_data_ptr_noswap(cachingAllocator().allocateOn(device_, nbytes));
    storage->set_nbytes(nbytes);
  }
  resize.applyTo(impl);
  if (a.view.defined()) {
    c10::TensorImpl* view = a.view.unsafeGetTensorImpl();
    if (nbytes > 0) {
      c10::StorageImpl* view_storage = view->unsafe_storage().unsafeGetStorageImpl();
      view_storage->set_data_ptr_noswap(c10::DataPtr(fooKernelAddress(storage->mutable_data()), c10::Device(c10::kCPU)));
      view_storage->set_nbytes(nbytes);
    }
    resize.applyTo(view);
  }
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
