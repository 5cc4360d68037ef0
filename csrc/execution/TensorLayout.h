// A tensor's layout by value: what a kernel view, a queued launch's outputs and a launch plan remember of
// a tensor without holding it (dtype, sizes, strides, storage offset, conjugate/negative bits, and the
// size of its storage).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

namespace foo {

// Compact: the host writes one per tensor at every queued launch, and a stream's worker reads it from
// another core.
struct TensorLayout {
  TensorLayout() = default;
  explicit TensorLayout(const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    const c10::IntArrayRef sizes = impl->sizes();
    const c10::IntArrayRef strides = impl->strides();
    sizes_and_strides.reserve(2 * sizes.size());
    sizes_and_strides.append(sizes.begin(), sizes.end());
    sizes_and_strides.append(strides.begin(), strides.end());
    storage_offset = impl->storage_offset();
    dtype = impl->dtype();
    storage_nbytes = impl->unsafe_storage().nbytes();
    conj = impl->is_conj();
    neg = impl->is_neg();
  }

  c10::IntArrayRef sizes() const { return c10::IntArrayRef(sizes_and_strides.data(), sizes_and_strides.size() / 2); }
  c10::IntArrayRef strides() const {
    return c10::IntArrayRef(sizes_and_strides.data() + sizes_and_strides.size() / 2, sizes_and_strides.size() / 2);
  }
  // Whether `t` has this layout (its storage's size aside).
  bool describes(const at::Tensor& t) const {
    return t.dtype() == dtype && t.sizes() == sizes() && t.strides() == strides() &&
           t.storage_offset() == storage_offset && t.is_conj() == conj && t.is_neg() == neg;
  }
  // Gives `impl` this layout's sizes, strides, offset and bits (its storage and dtype are the caller's).
  void applyTo(c10::TensorImpl* impl) const {
    impl->set_sizes_and_strides(sizes(), strides(), storage_offset);
    impl->_set_conj(conj);
    impl->_set_neg(neg);
  }
  // A foo tensor with this layout over `storage`.
  at::Tensor fooTensor(c10::Storage storage) const {
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
    applyTo(t.unsafeGetTensorImpl());
    return t;
  }

  c10::SmallVector<int64_t, 8> sizes_and_strides;  // the sizes, then the strides
  int64_t storage_offset = 0;
  caffe2::TypeMeta dtype;
  size_t storage_nbytes = 0;
  bool conj = false, neg = false;
};

}  // namespace foo
