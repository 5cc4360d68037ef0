// scaled_dot_product_attention asks a per-device dispatch stub which fused kernel to run; a device
// without an answer gets the math fallback. foo answers as CPU does, so attention on foo runs CPU's
// kernels (flash attention for CPU, through the host-kernel fallback) and matches CPU.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace foo {
namespace {

int64_t chooseAttentionKernel(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa) {
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace foo

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &foo::chooseAttentionKernel)
}  // namespace at::native
