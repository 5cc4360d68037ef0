// The operators foo implements itself rather than through the host-kernel fallback: allocation, copies
// between host and device or between devices, storage resizing and re-pointing, and the core views
// (which only rewrite metadata and never touch memory).
#include <ATen/EmptyTensor.h>
#include <ATen/Context.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/resize.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <torch/library.h>

#include "device/CachingAllocator.h"
#include "device/PinnedAllocator.h"
#include "execution/HostKernel.h"

namespace foo {
namespace {

c10::DeviceIndex resolveDevice(std::optional<c10::Device> device) {
  const c10::DeviceIndex index = device && device->has_index() ? device->index() : currentDevice();
  checkDeviceIndex(index);
  return index;
}

void checkStridedDense(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK_NOT_IMPLEMENTED(layout.value_or(c10::kStrided) == c10::kStrided,
                              "foo does not support layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

constexpr c10::DispatchKeySet kFooKeys{c10::DispatchKey::PrivateUse1};

// torch.use_deterministic_algorithms(True) with torch.utils.deterministic.fill_uninitialized_memory: memory a
// tensor gets without values is filled (NaN, an integer dtype's largest value), by a queued fill as on CUDA.
bool fillsUninitializedMemory() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

at::Tensor empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                 std::optional<c10::Device> device, std::optional<bool> pin_memory,
                 std::optional<c10::MemoryFormat> memory_format) {
  checkStridedDense(layout, pin_memory);
  at::detail::check_size_nonnegative(size);
  const c10::DeviceIndex index = resolveDevice(device);
  const caffe2::TypeMeta dtype_meta = c10::scalarTypeToTypeMeta(c10::dtype_or_default(dtype));
  const size_t nbytes = at::detail::computeStorageNbytesContiguous(size, dtype_meta.itemsize());
  // The hot allocation path: straight to the device's cache, no device switch.
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, cachingAllocator().allocateOn(index, nbytes),
                       &cachingAllocator(), /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), kFooKeys, dtype_meta);
  if (size.size() != 1 || size[0] != 0) t.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  if (memory_format && *memory_format != c10::MemoryFormat::Contiguous) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    t.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  if (C10_UNLIKELY(fillsUninitializedMemory())) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  checkStridedDense(layout, pin_memory);
  const c10::DeviceGuard guard(fooDevice(resolveDevice(device)));
  at::Tensor t =
      at::detail::empty_strided_generic(size, stride, &cachingAllocator(), kFooKeys, c10::dtype_or_default(dtype));
  if (C10_UNLIKELY(fillsUninitializedMemory())) at::native::fill_empty_deterministic_(t);
  return t;
}

// A copy's name in a profile, as CUDA's copies are named.
const char* copyName(bool from_foo, bool to_foo, bool pinned_host) {
  if (from_foo && to_foo) return "Memcpy DtoD (Device -> Device)";
  if (to_foo) return pinned_host ? "Memcpy HtoD (Pinned -> Device)" : "Memcpy HtoD (Pageable -> Device)";
  return pinned_host ? "Memcpy DtoH (Device -> Pinned)" : "Memcpy DtoH (Device -> Pageable)";
}

// Host<->foo and foo<->foo (any devices): the CPU copy kernel runs on kernel views, so strides and
// dtype conversions behave exactly as on CPU. As on CUDA, a copy between two tensors of one foo device,
// and a non_blocking copy from or to pinned host memory, run asynchronously on the current stream; a
// copy involving pageable host memory or two devices returns when done.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const c10::DeviceIndex device = isFoo(src) ? src.device().index() : dst.device().index();
  const bool host_side = !isFoo(src) || !isFoo(dst);
  const at::Tensor& host = isFoo(src) ? dst : src;
  const bool pinned_host = host_side && isPinned(host.storage().data());
  const bool async = host_side ? non_blocking && pinned_host : src.device() == dst.device();
  if (!host_side && !async) {
    // The other device's queued work may still use its tensor.
    const c10::DeviceIndex other = dst.device().index();
    synchronizeStream(other, currentStream(other));
  }
  // Queued work holds views that do not own memory: as on CUDA, the stream-ordered allocators keep
  // the memory from being reused too early (a pinned buffer is recorded on the copy's stream).
  at::Tensor dst_view = isFoo(dst) ? kernelView(dst) : (async ? hostAlias(dst) : dst);
  c10::Storage shared;
  if (!host_side && src.storage().is_alias_of(dst.storage())) shared = dst_view.storage();
  at::Tensor src_view = isFoo(src) ? kernelView(src, shared) : (async ? hostAlias(src) : src);
  const char* name = copyName(isFoo(src), isFoo(dst), pinned_host);
  if (sanitizer::enabled()) {
    sanitizer::LaunchAccesses accesses;
    accesses.read(src);
    accesses.write(dst);
    accesses.check(device, name);
  }
  if (!async) {
    runAfterStream(device, name, [&] {
      at::_ops::copy_::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), dst_view, src_view, false);
    }, fooActivityKindMemcpy);
    return dst;
  }
  // As CUDA does, everything a copy can get wrong (shapes, overlap) is checked on the host, so the
  // call that caused it raises and nothing is queued.
  at::TensorIteratorConfig()
      .add_output(dst_view)
      .add_const_input(src_view)
      .resize_outputs(false)
      .check_all_same_dtype(false)
      .check_all_same_device(false)
      .build();
  if (src.is_complex() && !dst.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }
  if (host_side) {
    recordPinnedUse(host.storage().data_ptr(),
                    FooStream::current(device).unwrap());
  }
  enqueueOnStream(device, name, [src_view, dst_view]() mutable {
    at::_ops::copy_::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), dst_view, src_view, false);
  }, fooActivityKindMemcpy);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  dst.resize_(src.sizes());
  return copy_from(src, dst, false);
}

void ensureStorageBytes(c10::TensorImpl* impl) {
  const size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), impl->itemsize(),
                                                         impl->storage_offset());
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resizeStorageBytes(storage, needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() == size && !memory_format) return self;
  impl->set_sizes_contiguous(size);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  const size_t old_nbytes = impl->storage().nbytes();
  ensureStorageBytes(impl);
  if (C10_UNLIKELY(fillsUninitializedMemory())) at::native::fill_resize_deterministic_(self, old_nbytes);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(), "Attempted to set the storage of a tensor on device \"",
              self.device(), "\" to a storage on different device \"", source.device(),
              "\".  This is no longer allowed; the devices must match.");
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ", storage_offset);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(storage_offset);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "mismatch in length of strides and shape");
    impl->set_sizes_and_strides(size, stride, storage_offset);
  }
  ensureStorageBytes(impl);
  return self;
}

at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty_storage(c10::Storage::use_byte_size_t(), 0, &cachingAllocator(), /*resizable=*/true);
  return set_storage(self, std::move(empty_storage), 0, {0}, {});
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  cachingAllocator().recordStream(self.storage().data_ptr(), stream);
}

// CPU's native_dropout draws from CPU's default generator: it takes no generator argument. foo's takes
// the same steps on foo tensors, so its mask comes from bernoulli_ with the device's foo generator: for
// the same seed it equals CPU's, and seeding foo alone reproduces it.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  const c10::TensorOptions bool_options = input.options().dtype(at::kBool);
  if (!train.value_or(true)) return {input.clone(), at::ones_like(input, bool_options)};
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;  // p == 1 drops everything, without dividing by zero
  at::Tensor mask = at::empty_like(input, bool_options);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

// Whether `from`'s data can replace `self`'s (Tensor.data = ..., which Module.to uses to keep Parameter
// objects across devices). PyTorch counts only its own devices' dense tensors as interchangeable; a
// dense foo tensor is as interchangeable with a dense CPU tensor as a CUDA one is.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  // PyTorch accepts compressed sparse tensors of any device here, but swapping their data keeps the old
  // device's components (SparseCsrTensorImpl has no shallow_copy_from): across devices, Module.to replaces them.
  if (isSparseCompressed(self) && self.device() != from.device()) return false;
  const auto dense = [](c10::DispatchKeySet keys) {
    return keys.has(c10::DispatchKey::Dense) &&
           keys.has_any(c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit}));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self.key_set()) && dense(from.key_set()));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

// As on CUDA, a sparse device tensor cannot be pinned; PyTorch's own message would name the dispatch key.
at::Tensor pin_sparse(const at::Tensor& self, std::optional<c10::Device>) {
  TORCH_CHECK(false, "cannot pin a ", self.layout(), " foo tensor: only dense CPU tensors can be pinned");
}

// Copies into a sparse foo tensor copy its components with foo's copies (any devices), as CUDA's do; the
// fallback would reject a source on another device.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("_pin_memory", TORCH_FN(pin_sparse));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("_pin_memory", TORCH_FN(pin_sparse));
}

// Conjugate and negative views reach the copy kernel as they are: the CPU copy on kernel views
// resolves them, exactly as CUDA's copy does (materialising them first would recurse into copy).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_whole_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
}

}  // namespace
}  // namespace foo
