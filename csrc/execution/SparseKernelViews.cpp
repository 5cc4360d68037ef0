// Sparse kernel views: how HostKernelCall hands sparse foo tensors (COO, CSR/CSC/BSR/BSC) to CPU's
// sparse kernels. A sparse tensor has no storage of its own, only component tensors (COO: indices and
// values; compressed: compressed indices, plain indices and values). Its kernel view is a CPU sparse
// tensor of the same layout and metadata whose components are the kernel views of the foo components,
// which join the call as ordinary tensor arguments. A sparse result is rebuilt on foo from its mapped
// components (arguments' components, views of them, or memory the kernel allocated on the device).
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>

#include "execution/HostKernel.h"

namespace foo {
namespace {

bool isCoo(const at::Tensor& t) { return t.layout() == c10::kSparse; }

at::SparseTensorImpl* cooImpl(const at::Tensor& t) { return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl()); }

at::SparseCsrTensorImpl* compressedImpl(const at::Tensor& t) {
  return static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
}

using Parts = c10::SmallVector<at::Tensor, 3>;

Parts partsOf(const at::Tensor& t) {
  if (isCoo(t)) return {cooImpl(t)->indices(), cooImpl(t)->values()};
  const at::SparseCsrTensorImpl* impl = compressedImpl(t);
  return {impl->compressed_indices(), impl->plain_indices(), impl->values()};
}

c10::SmallVector<c10::TensorImpl*, 3> partImpls(const at::Tensor& t) {
  c10::SmallVector<c10::TensorImpl*, 3> impls;
  for (const at::Tensor& part : partsOf(t)) impls.push_back(part.unsafeGetTensorImpl());
  return impls;
}

// An empty sparse tensor of `like`'s layout and dtype on `device` (CPU for kernel views).
at::Tensor emptySparseLike(const at::Tensor& like, c10::Device device) {
  const bool on_foo = device.type() == c10::DeviceType::PrivateUse1;
  if (isCoo(like)) {
    const c10::DeviceGuard guard(device);  // a COO tensor takes the current device
    return at::detail::make_tensor<at::SparseTensorImpl>(
        c10::DispatchKeySet(on_foo ? c10::DispatchKey::SparsePrivateUse1 : c10::DispatchKey::SparseCPU), like.dtype());
  }
  return at::detail::make_tensor<at::SparseCsrTensorImpl>(
      c10::DispatchKeySet(on_foo ? c10::DispatchKey::SparseCsrPrivateUse1 : c10::DispatchKey::SparseCsrCPU), device,
      like.layout(), like.dtype());
}

// Gives `t` the components `parts` and the sparse metadata (shape, sparse/dense dims, coalesced) of `like`.
void setParts(const at::Tensor& t, const Parts& parts, const at::Tensor& like) {
  if (isCoo(t)) {
    at::SparseTensorImpl* impl = cooImpl(t);
    const at::SparseTensorImpl* from = cooImpl(like);
    impl->raw_resize_(from->sparse_dim(), from->dense_dim(), like.sizes());
    impl->set_indices_and_values_unsafe(parts[0], parts[1]);
    impl->set_coalesced(from->coalesced());
  } else {
    compressedImpl(t)->set_member_tensors(parts[0], parts[1], parts[2], like.sizes());
  }
}

bool sameSparseMetadata(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  if (!isCoo(a)) return true;
  const at::SparseTensorImpl* x = cooImpl(a);
  const at::SparseTensorImpl* y = cooImpl(b);
  return x->sparse_dim() == y->sparse_dim() && x->dense_dim() == y->dense_dim() && x->coalesced() == y->coalesced();
}

}  // namespace

at::Tensor HostKernelCall::addSparseInput(c10::MaybeOwned<at::Tensor> t) {
  TORCH_CHECK_NOT_IMPLEMENTED(isCoo(*t) || isSparseCompressed(*t), op_name_, ": foo does not support layout ", t->layout());
  for (size_t i = 0; i < sparse_aliases_.size(); ++i) {
    if (sparse_aliases_[i].foo->unsafeGetTensorImpl() == t->unsafeGetTensorImpl()) {  // x.add_(x): one view
      signature_.add(static_cast<int64_t>(i));
      return sparse_aliases_[i].view;
    }
  }
  // The layout and sparse metadata; the components add their own words, so nnz is part of the signature.
  signature_.add(static_cast<int64_t>(t->layout()));
  signature_.add(t->sizes());
  if (isCoo(*t)) {
    signature_.add(cooImpl(*t)->sparse_dim());
    signature_.add(cooImpl(*t)->coalesced());
  }
  Parts views;
  for (at::Tensor& part : partsOf(*t)) views.push_back(addInput(c10::MaybeOwned<at::Tensor>::owned(std::move(part))));
  at::Tensor view = emptySparseLike(*t, c10::Device(c10::kCPU));
  setParts(view, views, *t);
  c10::SmallVector<c10::TensorImpl*, 3> parts = partImpls(view);
  sparse_aliases_.push_back({std::move(t), view, std::move(parts)});
  return view;
}

at::Tensor HostKernelCall::sparseOutput(const at::Tensor& result) {
  for (const SparseAlias& s : sparse_aliases_)
    if (s.view.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) return *s.foo;  // in-place or out=
  TORCH_CHECK_NOT_IMPLEMENTED(isCoo(result) || isSparseCompressed(result), op_name_, ": foo does not support layout ",
                              result.layout());
  Parts parts;
  for (at::Tensor& part : partsOf(result)) parts.push_back(output(std::move(part)));
  at::Tensor t = emptySparseLike(result, fooDevice(device_));
  setParts(t, parts, result);
  return t;
}

void HostKernelCall::markViewsRequiringGrad() {
  // Below autograd the flag changes nothing else. Such views are not recycled (a queued kernel may still
  // read the flag), and the outputs' shapes may depend on it: it is part of the signature.
  const bool grad_mode = c10::GradMode::is_enabled();
  const auto mark = [&](const at::Tensor& foo, at::Tensor& view) {
    const bool requires_grad = grad_mode && foo.requires_grad();
    signature_.add(requires_grad);
    if (requires_grad && view.defined() && !view.requires_grad()) view.set_requires_grad(true);
  };
  for (Alias& a : aliases_) mark(*a.foo, a.view);
  for (SparseAlias& s : sparse_aliases_) mark(*s.foo, s.view);
}

bool HostKernelCall::syncSparseArgument(SparseAlias& s) {
  // CPU's in-place and out= sparse kernels replace components (add_, zero_, resize_as_, copy_) or change
  // the shape, dims or coalesced flag.
  const bool replaced = partImpls(s.view) != s.parts;
  if (!replaced && sameSparseMetadata(s.view, *s.foo)) return false;
  Parts parts;
  if (replaced) {
    for (at::Tensor& part : partsOf(s.view)) parts.push_back(output(std::move(part)));
  } else {
    parts = partsOf(*s.foo);
  }
  setParts(*s.foo, parts, s.view);
  return true;
}

}  // namespace foo
