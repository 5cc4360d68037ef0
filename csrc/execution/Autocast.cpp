// Autocast for foo: the AutocastPrivateUse1 dispatch key gets exactly CUDA's cast policies, built from
// the same op lists PyTorch uses for CUDA (ATen/autocast_mode.h), so torch.autocast("foo") casts
// op by op as torch.autocast("cuda") does. Every other op falls through to the foo kernels.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace foo {
namespace {
// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE spells its signatures with unqualified ATen types.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

at::Tensor binaryCrossEntropyBanned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                    int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define FOO_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FOO_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define FOO_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define FOO_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(FOO_LOWER_PRECISION_FP)
  AT_FORALL_FP32(FOO_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(FOO_FP32_SET_OPT_DTYPE)
  // norm has no dtype argument to flip: its fp32 kernel redispatches to the overload that has one.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(FOO_PROMOTE)
#undef FOO_LOWER_PRECISION_FP
#undef FOO_FP32
#undef FOO_FP32_SET_OPT_DTYPE
#undef FOO_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binaryCrossEntropyBanned));
}

}  // namespace
}  // namespace foo
