// The meta functions that plan a boxed call of a signature not seen before (new shapes) without running it:
// see planFromMeta() in MetaFunctions.h.
#include "execution/MetaFunctions.h"

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <array>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/acos_meta_dispatch.h>
#include <ATen/ops/acosh_meta_dispatch.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/asin_meta_dispatch.h>
#include <ATen/ops/asinh_meta_dispatch.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/atan_meta_dispatch.h>
#include <ATen/ops/atanh_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_left_shift_meta_dispatch.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_right_shift_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/copysign_meta_dispatch.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cosh_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/digamma_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/elu_backward_meta_dispatch.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erfc_meta_dispatch.h>
#include <ATen/ops/erfinv_meta_dispatch.h>
#include <ATen/ops/exp2_meta_dispatch.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/fill_meta_dispatch.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/fmax_meta_dispatch.h>
#include <ATen/ops/fmin_meta_dispatch.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/frac_meta_dispatch.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/gelu_backward_meta_dispatch.h>
#include <ATen/ops/gelu_meta_dispatch.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_backward_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/heaviside_meta_dispatch.h>
#include <ATen/ops/hypot_meta_dispatch.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/leaky_relu_backward_meta_dispatch.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/lgamma_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/log10_meta_dispatch.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log2_meta_dispatch.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/logaddexp_meta_dispatch.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/max_meta_dispatch.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/min_meta_dispatch.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/nextafter_meta_dispatch.h>
#include <ATen/ops/normal_meta_dispatch.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/random_meta_dispatch.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sigmoid_backward_meta_dispatch.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/signbit_meta_dispatch.h>
#include <ATen/ops/silu_backward_meta_dispatch.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sinh_meta_dispatch.h>
#include <ATen/ops/softplus_backward_meta_dispatch.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/tan_meta_dispatch.h>
#include <ATen/ops/tanh_backward_meta_dispatch.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/threshold_meta_dispatch.h>
#include <ATen/ops/tril_meta_dispatch.h>
#include <ATen/ops/triu_meta_dispatch.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/xlogy_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/isposinf_meta_dispatch.h>
#include <ATen/ops/isneginf_meta_dispatch.h>
#include <ATen/ops/zero_meta_dispatch.h>

namespace foo {
namespace {

// As FastOps.cpp's StructuredMeta for its unboxed operators: a call of a shape not seen before of one of
// these structured operators is planned from its C++ meta function (the one CPU's kernel sizes its outputs
// with), called directly since PyTorch registers Python meta functions over them in the dispatcher. The
// table holds each function type-erased beside the caller for its signature, which converts the boxed
// arguments: a template instance per signature, not per operator, so the table costs the build little.
using AnyFunction = void (*)();
template <class... Params>
using MetaFunction = at::Tensor (*)(Params...);
template <class... Params>
using InPlaceMetaFunction = at::Tensor& (*)(Params...);  // returns the argument it writes

// Hand-written meta functions of common CPU kernels that have none in C++, from PyTorch's own checks and the
// kernels' own allocations (aten/src/ATen/native/layer_norm.cpp, TensorAdvancedIndexing.cpp); verified against
// the kernel at its first call of each key (HostKernelCall::planFromMeta), as every meta function is.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNormMeta(const at::Tensor& input,
                                                                   at::IntArrayRef normalized_shape,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const std::optional<at::Tensor>& bias, double) {
  const at::Tensor no_tensor;
  const auto [rows, row_size] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight ? *weight : no_tensor,
                                                                      bias ? *bias : no_tensor);
  (void)row_size;
  // Statistics in the parameters' dtype where it differs from the input's (a bfloat16 input with float
  // parameters: CPU's one mixed case; other mixes raise in the kernel, at the first call of their dtypes).
  const std::optional<at::Tensor>& parameter = weight ? weight : bias;
  const bool mixed = parameter && parameter->scalar_type() != input.scalar_type();
  const c10::ScalarType stat_dtype = mixed ? c10::kFloat : input.scalar_type();
  c10::DimVector stat_shape(input.sizes().begin(), input.sizes().end() - static_cast<int64_t>(normalized_shape.size()));
  stat_shape.resize(input.dim(), 1);
  const auto stats = [&] { return at::empty({rows}, input.options().dtype(stat_dtype)).view(stat_shape); };
  return {at::empty_like(input, at::MemoryFormat::Contiguous), stats(), stats()};
}

// aten/src/ATen/native/TensorAdvancedIndexing.cpp, index_select_out_cpu_: its checks, then a contiguous result.
at::Tensor indexSelectMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index);

at::Tensor& indexSelectOutMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  const at::Tensor result = indexSelectMeta(self, dim, index);
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_select(): self and result must have the same scalar type");
  at::native::resize_output(out, result.sizes());
  return out;
}

at::Tensor indexSelectMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t count = index.numel();
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(!(self.dim() == 0 && count != 1), "index_select(): Index to scalar can have only 1 value, got ", count,
              " value(s)");
  TORCH_CHECK(index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  c10::DimVector sizes(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) sizes[dim] = count;
  return at::empty(sizes, self.options());
}

// Factories whose sizes are their numbers (RangeFactories.cpp, TensorFactories.cpp): the out= operators
// torch.arange, torch.eye and torch.linspace call, with CPU's checks and sizes.
at::Tensor& arangeOutMeta(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_meta",
                             [&] { size = at::native::compute_arange_size<scalar_t>(start, end, step); });
  if (out.numel() != size) out.resize_({size});
  return out;
}

at::Tensor& eyeOutMeta(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  return out;
}

at::Tensor& squareEyeOutMeta(int64_t n, at::Tensor& out) { return eyeOutMeta(n, n, out); }

at::Tensor& linspaceOutMeta(const at::Scalar&, const at::Scalar&, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  return out;
}

// bernoulli_ with a probability fills its tensor in place: CPU's kernel checks the probability only (where
// this raises, the call runs and CPU's kernel raises its own error).
at::Tensor& bernoulliMeta(at::Tensor& self, double p, std::optional<at::Generator>) {
  TORCH_CHECK(0 <= p && p <= 1);
  return self;
}

// CPU's relu_ is clamp_min_(self, 0), a structured operator.
at::Tensor& reluMeta(at::Tensor& self) { return at::meta::clamp_min_(self, 0); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNormBackwardMeta(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> output_mask) {
  const at::Tensor no_tensor;
  const at::Tensor& gamma = weight ? *weight : no_tensor;
  const at::Tensor& beta = bias ? *bias : no_tensor;
  const auto [rows, row_size] = at::native::_check_layer_norm_inputs(input, normalized_shape, gamma, beta);
  (void)row_size;
  (void)grad_out, (void)mean, (void)rstd;
  const auto like = [](const at::Tensor& t) { return t.defined() ? at::empty_like(t, at::MemoryFormat::Contiguous) : t; };
  return {output_mask[0] ? like(input) : at::Tensor(), output_mask[1] ? like(gamma) : at::Tensor(),
          output_mask[2] ? like(beta) : at::Tensor()};
}

// The memory format CPU's batch norm kernels lay their output out in (Normalization.cpp): the input's own
// where it is dense in one (and `dense`: the kernel's other operands are), else the one it suggests.
bool isDenseInAFormat(const at::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

at::MemoryFormat batchNormFormat(const at::Tensor& input, bool dense = true) {
  if (!dense || !isDenseInAFormat(input)) return input.suggest_memory_format();
  if (input.is_contiguous()) return at::MemoryFormat::Contiguous;
  return input.is_contiguous(at::MemoryFormat::ChannelsLast3d) ? at::MemoryFormat::ChannelsLast3d
                                                               : at::MemoryFormat::ChannelsLast;
}

// The dtype of per-channel statistics and parameter gradients: float for a reduced-precision input with float
// parameters (CPU's one mixed case; other mixes raise in the kernel, at the first call of their dtypes). Every
// defined parameter must hold one number per channel: CPU's kernels index them by channel unchecked, so a call
// with others runs (and does what CPU's kernel does).
c10::ScalarType perChannelDtype(const at::Tensor& input, int64_t channels,
                                std::initializer_list<const std::optional<at::Tensor>*> parameters) {
  bool mixed = false;
  for (const std::optional<at::Tensor>* parameter : parameters) {
    if (!*parameter || !(*parameter)->defined()) continue;
    TORCH_CHECK((*parameter)->dim() == 1 && (*parameter)->numel() == channels && (*parameter)->is_contiguous());
    mixed = mixed || (*parameter)->scalar_type() != input.scalar_type();
  }
  return mixed ? c10::kFloat : input.scalar_type();
}

// batch_norm_cpu: statistics per channel in training, empty otherwise (the running ones are used).
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNormMeta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double, double) {
  TORCH_CHECK(input.dim() >= 2 && (training ? input.numel() != 0 : running_mean && running_var));
  const c10::ScalarType dtype = perChannelDtype(input, input.size(1), {&weight, &bias, &running_mean, &running_var});
  const auto stats = [&] { return at::empty({training ? input.size(1) : 0}, input.options().dtype(dtype)); };
  return {at::empty_like(input, batchNormFormat(input)), stats(), stats()};
}

// batch_norm_backward_cpu_template.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNormBackwardMeta(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool training, double,
    std::array<bool, 3> output_mask) {
  TORCH_CHECK(input.dim() >= 2 && grad_out.sizes() == input.sizes());
  TORCH_CHECK(training ? save_mean && save_invstd : running_mean && running_var);
  const int64_t channels = input.size(1);
  const c10::ScalarType dtype =
      perChannelDtype(input, channels, {&weight, &running_mean, &running_var, &save_mean, &save_invstd});
  const at::MemoryFormat format = batchNormFormat(
      input, isDenseInAFormat(grad_out) && input.suggest_memory_format() == grad_out.suggest_memory_format());
  const auto per_channel = [&](bool wanted) {
    return wanted ? at::empty({channels}, input.options().dtype(dtype)) : at::Tensor();
  };
  return {output_mask[0] ? at::empty_like(input, format) : at::Tensor(), per_channel(output_mask[1]),
          per_channel(output_mask[2])};
}

// aten/src/ATen/native/group_norm.cpp and the CPU kernel's checks (N, C, HxW and group are the input's).
void checkGroupNormSizes(const at::Tensor& input, const std::optional<at::Tensor>& weight, int64_t batch,
                         int64_t channels, int64_t spatial, int64_t groups) {
  TORCH_CHECK(groups > 0 && channels % groups == 0 && input.dim() >= 2 && input.size(0) == batch &&
              input.size(1) == channels && input.numel() == batch * channels * spatial);
  TORCH_CHECK(!weight || !weight->defined() || (weight->dim() == 1 && weight->numel() == channels));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeGroupNormMeta(const at::Tensor& input,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const std::optional<at::Tensor>& bias, int64_t batch,
                                                                   int64_t channels, int64_t spatial, int64_t groups,
                                                                   double) {
  checkGroupNormSizes(input, weight, batch, channels, spatial, groups);
  checkGroupNormSizes(input, bias, batch, channels, spatial, groups);
  const at::MemoryFormat format = input.suggest_memory_format();
  TORCH_CHECK(input.is_contiguous(format));
  const c10::ScalarType dtype = perChannelDtype(input, channels, {&weight, &bias});
  const auto stats = [&] { return at::empty({batch, groups}, input.options().dtype(dtype)); };
  return {at::empty_like(input, format), stats(), stats()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeGroupNormBackwardMeta(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t batch, int64_t channels, int64_t spatial, int64_t groups,
    std::array<bool, 3> output_mask) {
  checkGroupNormSizes(input, weight, batch, channels, spatial, groups);
  TORCH_CHECK(grad_out.sizes() == input.sizes() && mean.numel() == batch * groups && rstd.numel() == batch * groups);
  TORCH_CHECK(!(output_mask[1] || output_mask[2]) || (weight && weight->defined()));
  const auto like_weight = [&](bool wanted) {
    return wanted ? at::empty_like(*weight, at::MemoryFormat::Contiguous) : at::Tensor();
  };
  return {output_mask[0] ? at::empty_like(input, input.suggest_memory_format()) : at::Tensor(),
          like_weight(output_mask[1]), like_weight(output_mask[2])};
}

// EmbeddingBag.cpp, _embedding_bag_cpu_impl (`requires_grad` for _embedding_bag, not for its forward-only
// variant): one output row per bag; `offset2bag` only where the kernel does not take its fast path for sums;
// the index outputs in the indices' and offsets' common dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embeddingBagSizes(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, int64_t mode,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset, int64_t padding_idx,
    bool requires_grad) {
  enum { kSum, kMean, kMax };
  TORCH_CHECK(weight.dim() == 2 && indices.dim() == 1 && offsets.dim() == 1 && mode >= kSum && mode <= kMax);
  const int64_t bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  TORCH_CHECK(bags >= 0);
  const bool weighted = per_sample_weights && per_sample_weights->defined();
  TORCH_CHECK(!weighted || (mode == kSum && per_sample_weights->dim() == 1 &&
                            per_sample_weights->numel() == indices.numel()));
  const c10::ScalarType dtype = weight.scalar_type();
  const bool fast_sum = (dtype == c10::kFloat || dtype == c10::kHalf || dtype == c10::kBFloat16) &&
                        weight.stride(1) == 1 && padding_idx < 0 && (!weighted || per_sample_weights->stride(0) == 1);
  const at::TensorOptions index_options =
      offsets.options().dtype(at::promote_types(indices.scalar_type(), offsets.scalar_type()));
  const bool per_bag = requires_grad || mode != kSum;
  at::Tensor bag_size = at::empty({per_bag ? bags : offsets.size(0)}, index_options);
  return {at::empty({bags, weight.size(1)}, weight.options()),
          at::empty({mode == kSum && fast_sum ? 0 : indices.size(0)}, index_options), bag_size,
          at::empty(mode == kMax ? c10::IntArrayRef{bags, weight.size(1)} : bag_size.sizes(), index_options)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embeddingBagMeta(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool, int64_t mode, bool,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset, int64_t padding_idx) {
  return embeddingBagSizes(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, true);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embeddingBagForwardOnlyMeta(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool, int64_t mode, bool,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset, int64_t padding_idx) {
  return embeddingBagSizes(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, false);
}

// _embedding_bag_backward, dense: the weight's gradient (a sparse one is not planned).
at::Tensor embeddingBagBackwardMeta(const at::Tensor& grad, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, int64_t num_weights, bool, int64_t,
                                    bool sparse, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(!sparse && grad.dim() == 2 && num_weights >= 0);
  return at::empty({num_weights, grad.size(1)}, grad.options());
}

// Dropout.cpp: grad * mask * scale.
at::Tensor nativeDropoutBackwardMeta(const at::Tensor& grad, const at::Tensor& mask, double) {
  return at::meta::mul(grad, mask);
}

// TensorAdvancedIndexing.cpp, _index_put_impl_: with one boolean mask and one value, CPU's kernel fills
// the masked elements (`x[mask] = 0.0`), the mask of the sizes of the dimensions it indexes; otherwise the
// values must broadcast to the indexed shape, with integer indices only (a mask's depends on its values).
at::Tensor& indexPutMeta(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                         const at::Tensor& values, bool accumulate, bool) {
  int64_t dim = 0;
  std::optional<at::Tensor> mask;
  size_t defined = 0;
  for (const std::optional<at::Tensor> index : indices) {
    if (!index || !index->defined()) {
      dim += mask ? 0 : 1;
      continue;
    }
    ++defined;
    if (index->scalar_type() == c10::kBool || index->scalar_type() == c10::kByte) mask = index;
  }
  if (mask && defined == 1 && !accumulate && values.numel() == 1) {
    TORCH_CHECK(dim + mask->dim() <= self.dim());
    for (int64_t j = 0; j < mask->dim(); ++j) TORCH_CHECK(mask->size(j) == self.size(dim + j));
    return self;
  }
  TORCH_CHECK(!mask);
  TORCH_CHECK(at::is_expandable_to(values.sizes(), at::meta::index(self, indices).sizes()));
  return self;
}

// index_fill_ with a number: its index is a vector or a scalar, its dimension one of self's (a 0-dim self
// counts as one).
at::Tensor& indexFillMeta(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  TORCH_CHECK(index.dim() <= 1 && (self.is_complex() || !value.isComplex()));
  c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  return self;
}

// The helpers of cummax/cummin, which their composites call with outputs already of the input's sizes.
void cumulativeHelperMeta(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  TORCH_CHECK(values.sizes() == self.sizes() && indices.sizes() == self.sizes());
  c10::maybe_wrap_dim(dim, self.dim());
}

// uniform_ (DistributionTemplates.h): CPU's kernel checks the range fits the dtype (each bound does where
// the kernel key's number ranges say so).
at::Tensor& uniformMeta(at::Tensor& self, double from, double to, std::optional<at::Generator>) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && from <= to);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "uniform_meta", [&] {
    TORCH_CHECK(to - from <= static_cast<double>(std::numeric_limits<scalar_t>::max()));
  });
  return self;
}

// A boxed argument as a meta function's parameter of type Param.
template <class Param>
struct FromBoxed;
template <>
struct FromBoxed<const at::Tensor&> {
  static at::Tensor get(const c10::IValue& value, HostKernelCall& call) { return call.metaOf(value.toTensor()); }
};
template <>
struct FromBoxed<at::Tensor&> {
  static at::Tensor& get(const c10::IValue& value, HostKernelCall& call) { return call.writtenMetaOf(value.toTensor()); }
};
template <>
struct FromBoxed<const at::Scalar&> {
  static at::Scalar get(const c10::IValue& value, HostKernelCall&) { return value.toScalar(); }
};
template <>
struct FromBoxed<const std::optional<at::Scalar>&> {
  static std::optional<at::Scalar> get(const c10::IValue& value, HostKernelCall&) {
    return value.isNone() ? std::nullopt : std::optional<at::Scalar>(value.toScalar());
  }
};
template <>
struct FromBoxed<bool> {
  static bool get(const c10::IValue& value, HostKernelCall&) { return value.toBool(); }
};
template <>
struct FromBoxed<int64_t> {
  static int64_t get(const c10::IValue& value, HostKernelCall&) { return value.toInt(); }
};
template <>
struct FromBoxed<std::optional<bool>> {
  static std::optional<bool> get(const c10::IValue& value, HostKernelCall&) { return value.toOptional<bool>(); }
};
template <>
struct FromBoxed<std::optional<int64_t>> {
  static std::optional<int64_t> get(const c10::IValue& value, HostKernelCall&) {
    return value.toOptional<int64_t>();
  }
};
template <>
struct FromBoxed<std::optional<at::ScalarType>> {
  static std::optional<at::ScalarType> get(const c10::IValue& value, HostKernelCall&) {
    return value.isNone() ? std::nullopt : std::optional<at::ScalarType>(value.toScalarType());
  }
};
template <>
struct FromBoxed<c10::string_view> {
  static c10::string_view get(const c10::IValue& value, HostKernelCall&) { return value.toStringView(); }
};
template <>
struct FromBoxed<const std::optional<at::Tensor>&> {
  static std::optional<at::Tensor> get(const c10::IValue& value, HostKernelCall& call) {
    return value.isNone() ? std::nullopt : std::optional<at::Tensor>(call.metaOf(value.toTensor()));
  }
};
template <>
struct FromBoxed<std::array<bool, 3>> {
  static std::array<bool, 3> get(const c10::IValue& value, HostKernelCall&) {
    const c10::List<bool> flags = value.toBoolList();
    return {flags.get(0), flags.get(1), flags.get(2)};
  }
};
template <>
struct FromBoxed<double> {
  static double get(const c10::IValue& value, HostKernelCall&) { return value.toDouble(); }
};
template <>
struct FromBoxed<std::optional<c10::string_view>> {
  static std::optional<c10::string_view> get(const c10::IValue& value, HostKernelCall&) {
    return value.isNone() ? std::nullopt : std::optional<c10::string_view>(value.toStringView());
  }
};
template <>
struct FromBoxed<std::optional<at::Generator>> {
  // Meta functions draw nothing.
  static std::optional<at::Generator> get(const c10::IValue&, HostKernelCall&) { return std::nullopt; }
};
template <>
struct FromBoxed<at::ScalarType> {
  static at::ScalarType get(const c10::IValue& value, HostKernelCall&) { return value.toScalarType(); }
};
template <>
struct FromBoxed<const at::ITensorListRef&> {
  struct Tensors {
    std::vector<at::Tensor> tensors;
    operator at::ITensorListRef() const { return at::ITensorListRef(c10::ArrayRef<at::Tensor>(tensors)); }
  };
  static Tensors get(const c10::IValue& value, HostKernelCall& call) {
    Tensors metas;
    for (const at::Tensor& t : value.toTensorList()) metas.tensors.push_back(call.metaOf(t));
    return metas;
  }
};
template <>
struct FromBoxed<const c10::List<std::optional<at::Tensor>>&> {
  static c10::List<std::optional<at::Tensor>> get(const c10::IValue& value, HostKernelCall& call) {
    c10::List<std::optional<at::Tensor>> metas;
    for (const std::optional<at::Tensor> t : value.toOptionalTensorList()) {
      metas.push_back(t && t->defined() ? std::optional<at::Tensor>(call.metaOf(*t)) : t);
    }
    return metas;
  }
};
template <>
struct FromBoxed<at::IntArrayRef> {
  // The dimensions themselves: the call's temporary outlives the meta function's use of them.
  static c10::DimVector get(const c10::IValue& value, HostKernelCall&) { return value.toDimVector(); }
};
template <>
struct FromBoxed<at::OptionalIntArrayRef> {
  struct Dims {
    std::optional<c10::DimVector> dims;
    operator at::OptionalIntArrayRef() const { return dims ? at::OptionalIntArrayRef(*dims) : std::nullopt; }
  };
  static Dims get(const c10::IValue& value, HostKernelCall&) {
    return {value.isNone() ? std::nullopt : std::optional<c10::DimVector>(value.toDimVector())};
  }
};

void appendOutputs(const at::Tensor& output, std::vector<at::Tensor>& outputs) { outputs.push_back(output); }

template <class... Tensors>
void appendOutputs(const std::tuple<Tensors...>& tuple, std::vector<at::Tensor>& outputs) {
  std::apply([&](const auto&... output) { (outputs.push_back(output), ...); }, tuple);
}

template <class Function, class... Params, size_t... I>
void callWithBoxed(AnyFunction fn, const c10::IValue* args, HostKernelCall& call, std::vector<at::Tensor>& outputs,
                   std::index_sequence<I...>) {
  if constexpr (std::is_void_v<std::invoke_result_t<Function, Params...>>) {
    reinterpret_cast<Function>(fn)(FromBoxed<Params>::get(args[I], call)...);  // it checks its arguments only
  } else {
    appendOutputs(reinterpret_cast<Function>(fn)(FromBoxed<Params>::get(args[I], call)...), outputs);
  }
}

template <class Function, class... Params>
void callWithBoxed(AnyFunction fn, const c10::IValue* args, HostKernelCall& call, std::vector<at::Tensor>& outputs) {
  callWithBoxed<Function, Params...>(fn, args, call, outputs, std::index_sequence_for<Params...>());
}

struct BoxedMeta {
  void (*caller)(AnyFunction fn, const c10::IValue* args, HostKernelCall& call, std::vector<at::Tensor>& outputs);
  AnyFunction fn;
  size_t arguments;  // the meta function's: a schema with another count plans nothing
  // The positions of the integer arguments that are sizes (native_group_norm's N, C, HxW): as a tensor's
  // sizes, they select no kernel, so they stay out of the kernel key (a new batch size is planned).
  uint64_t size_arguments = 0;
};

BoxedMeta sizedBy(BoxedMeta meta, std::initializer_list<int> positions) {
  for (int position : positions) meta.size_arguments |= uint64_t{1} << position;
  return meta;
}

template <class Result, class... Params>
BoxedMeta boxedMetaOf(Result (*fn)(Params...)) {
  return {&callWithBoxed<Result (*)(Params...), Params...>, reinterpret_cast<AnyFunction>(fn), sizeof...(Params)};
}

// The table's entry for a meta function, by what it returns: one tensor, the argument it writes, nothing (it
// checks the arguments it writes), or two to four tensors. Its parameter types are given where its name is overloaded.
template <class... Params>
BoxedMeta boxedMeta(MetaFunction<Params...> fn) {
  return boxedMetaOf(fn);
}
template <class... Params>
BoxedMeta boxedMeta(InPlaceMetaFunction<Params...> fn) {
  return boxedMetaOf(fn);
}
template <class... Params>
BoxedMeta boxedMeta(void (*fn)(Params...)) {
  return boxedMetaOf(fn);
}
template <class... Params>
BoxedMeta boxedMeta(std::tuple<at::Tensor, at::Tensor> (*fn)(Params...)) {
  return boxedMetaOf(fn);
}
template <class... Params>
BoxedMeta boxedMeta(std::tuple<at::Tensor, at::Tensor, at::Tensor> (*fn)(Params...)) {
  return boxedMetaOf(fn);
}
template <class... Params>
BoxedMeta boxedMeta(std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> (*fn)(Params...)) {
  return boxedMetaOf(fn);
}

// Meta functions of one type, by operator name.
template <class Function>
using Entries = std::initializer_list<std::pair<const char*, Function>>;

// A meta function's tensor and scalar parameter types, named short: the table spells many signatures.
using T = const at::Tensor&;
using S = const at::Scalar&;

const std::unordered_map<std::string, BoxedMeta>& boxedMetas() {
  static const auto* const table = [] {
    auto* t = new std::unordered_map<std::string, BoxedMeta>;
    const auto add = [t](const char* name, BoxedMeta meta) { t->emplace(std::string("aten::") + name, meta); };
    const auto addEach = [&](const auto& entries) {
      for (const auto& [name, fn] : entries) add(name, boxedMeta(fn));
    };
    addEach(Entries<MetaFunction<T>>{
        {"exp", at::meta::exp}, {"log", at::meta::log}, {"sin", at::meta::sin}, {"cos", at::meta::cos},
        {"isneginf", at::meta::isneginf}, {"isposinf", at::meta::isposinf},
        {"tan", at::meta::tan}, {"sqrt", at::meta::sqrt}, {"rsqrt", at::meta::rsqrt}, {"neg", at::meta::neg},
        {"reciprocal", at::meta::reciprocal}, {"erf", at::meta::erf}, {"erfc", at::meta::erfc},
        {"erfinv", at::meta::erfinv}, {"exp2", at::meta::exp2}, {"expm1", at::meta::expm1},
        {"log1p", at::meta::log1p}, {"log2", at::meta::log2}, {"log10", at::meta::log10},
        {"floor", at::meta::floor}, {"ceil", at::meta::ceil}, {"trunc", at::meta::trunc},
        {"frac", at::meta::frac}, {"sign", at::meta::sign}, {"sgn", at::meta::sgn}, {"asin", at::meta::asin},
        {"acos", at::meta::acos}, {"atan", at::meta::atan}, {"sinh", at::meta::sinh}, {"cosh", at::meta::cosh},
        {"asinh", at::meta::asinh}, {"acosh", at::meta::acosh}, {"atanh", at::meta::atanh},
        {"silu", at::meta::silu}, {"mish", at::meta::mish}, {"hardsigmoid", at::meta::hardsigmoid},
        {"digamma", at::meta::digamma}, {"lgamma", at::meta::lgamma}, {"signbit", at::meta::signbit},
        {"bitwise_not", at::meta::bitwise_not}, {"round", at::meta::round}, {"sigmoid", at::meta::sigmoid},
        {"tanh", at::meta::tanh}});
    addEach(Entries<MetaFunction<T, T>>{
        {"mul.Tensor", at::meta::mul}, {"div.Tensor", at::meta::div}, {"maximum", at::meta::maximum},
        {"minimum", at::meta::minimum}, {"fmax", at::meta::fmax}, {"fmin", at::meta::fmin},
        {"atan2", at::meta::atan2}, {"pow.Tensor_Tensor", at::meta::pow}, {"eq.Tensor", at::meta::eq},
        {"ne.Tensor", at::meta::ne}, {"lt.Tensor", at::meta::lt}, {"le.Tensor", at::meta::le},
        {"gt.Tensor", at::meta::gt}, {"ge.Tensor", at::meta::ge}, {"bitwise_and.Tensor", at::meta::bitwise_and},
        {"bitwise_or.Tensor", at::meta::bitwise_or}, {"bitwise_xor.Tensor", at::meta::bitwise_xor},
        {"remainder.Tensor", at::meta::remainder}, {"fmod.Tensor", at::meta::fmod},
        {"hypot", at::meta::hypot}, {"copysign.Tensor", at::meta::copysign},
        {"logaddexp", at::meta::logaddexp}, {"xlogy.Tensor", at::meta::xlogy}, {"mm", at::meta::mm},
        {"bmm", at::meta::bmm}, {"sigmoid_backward", at::meta::sigmoid_backward},
        {"tanh_backward", at::meta::tanh_backward}, {"silu_backward", at::meta::silu_backward},
        {"hardsigmoid_backward", at::meta::hardsigmoid_backward}, {"heaviside", at::meta::heaviside},
        {"nextafter", at::meta::nextafter}, {"bitwise_left_shift.Tensor", at::meta::bitwise_left_shift},
        {"bitwise_right_shift.Tensor", at::meta::bitwise_right_shift}});
    addEach(Entries<MetaFunction<T, T, S>>{
        {"add.Tensor", at::meta::add}, {"sub.Tensor", at::meta::sub},
        {"threshold_backward", at::meta::threshold_backward}, {"lerp.Scalar", at::meta::lerp}});
    addEach(Entries<MetaFunction<T, S>>{
        {"pow.Tensor_Scalar", at::meta::pow}, {"eq.Scalar", at::meta::eq}, {"ne.Scalar", at::meta::ne},
        {"lt.Scalar", at::meta::lt}, {"le.Scalar", at::meta::le}, {"gt.Scalar", at::meta::gt},
        {"ge.Scalar", at::meta::ge}, {"leaky_relu", at::meta::leaky_relu}, {"clamp_min", at::meta::clamp_min},
        {"clamp_max", at::meta::clamp_max}});
    add("softplus", boxedMeta<T, S, S>(at::meta::softplus));
    add("elu", boxedMeta<T, S, S, S>(at::meta::elu));
    add("addcmul", boxedMeta<T, T, T, S>(at::meta::addcmul));
    add("addcdiv", boxedMeta<T, T, T, S>(at::meta::addcdiv));
    add("addmm", boxedMeta<T, T, T, S, S>(at::meta::addmm));
    add("baddbmm", boxedMeta<T, T, T, S, S>(at::meta::baddbmm));
    add("sum.dim_IntList", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>>(at::meta::sum));
    add("mean.dim", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>>(at::meta::mean));
    add("amax", boxedMeta<T, at::IntArrayRef, bool>(at::meta::amax));
    add("amin", boxedMeta<T, at::IntArrayRef, bool>(at::meta::amin));
    add("argmax", boxedMeta<T, std::optional<int64_t>, bool>(at::meta::argmax));
    add("argmin", boxedMeta<T, std::optional<int64_t>, bool>(at::meta::argmin));
    add("cumsum", boxedMeta<T, int64_t, std::optional<at::ScalarType>>(at::meta::cumsum));
    add("cumprod", boxedMeta<T, int64_t, std::optional<at::ScalarType>>(at::meta::cumprod));
    add("_softmax", boxedMeta<T, int64_t, bool>(at::meta::_softmax));
    add("_log_softmax", boxedMeta<T, int64_t, bool>(at::meta::_log_softmax));
    add("gelu", boxedMeta<T, c10::string_view>(at::meta::gelu));
    add("clamp", boxedMeta<T, const std::optional<at::Scalar>&, const std::optional<at::Scalar>&>(at::meta::clamp));
    add("threshold", boxedMeta<T, S, S>(at::meta::threshold));
    add("tril", boxedMeta<T, int64_t>(at::meta::tril));
    add("triu", boxedMeta<T, int64_t>(at::meta::triu));
    add("prod.dim_int", boxedMeta<T, int64_t, bool, std::optional<at::ScalarType>>(at::meta::prod));
    add("any.dim", boxedMeta<T, int64_t, bool>(at::meta::any));
    add("all.dim", boxedMeta<T, int64_t, bool>(at::meta::all));
    add("linalg_vector_norm",
        boxedMeta<T, S, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>>(at::meta::linalg_vector_norm));
    add("mse_loss", boxedMeta<T, T, int64_t>(at::meta::mse_loss));
    // Backward of activations and softmax.
    add("gelu_backward", boxedMeta<T, T, c10::string_view>(at::meta::gelu_backward));
    add("_softmax_backward_data", boxedMeta<T, T, int64_t, at::ScalarType>(at::meta::_softmax_backward_data));
    add("leaky_relu_backward", boxedMeta<T, T, S, bool>(at::meta::leaky_relu_backward));
    add("softplus_backward", boxedMeta<T, T, S, S>(at::meta::softplus_backward));
    add("elu_backward", boxedMeta<T, S, S, S, bool, T>(at::meta::elu_backward));
    // Indexing: gathers and scatters by index tensors, advanced indexing, concatenation.
    add("gather", boxedMeta<T, int64_t, T, bool>(at::meta::gather));
    add("scatter.src", boxedMeta<T, int64_t, T, T>(at::meta::scatter));
    add("scatter.value", boxedMeta<T, int64_t, T, S>(at::meta::scatter));
    add("scatter_add", boxedMeta<T, int64_t, T, T>(at::meta::scatter_add));
    add("index_add", boxedMeta<T, int64_t, T, T, S>(at::meta::index_add));
    add("index.Tensor", boxedMeta<T, const c10::List<std::optional<at::Tensor>>&>(at::meta::index));
    add("cat", boxedMeta<const at::ITensorListRef&, int64_t>(at::meta::cat));
    add("sort.stable", boxedMeta<T, std::optional<bool>, int64_t, bool>(at::meta::sort));
    add("topk", boxedMeta<T, int64_t, int64_t, bool, bool>(at::meta::topk));
    // Pooling and its backward.
    using Ints = at::IntArrayRef;
    add("max_pool2d_with_indices", boxedMeta<T, Ints, Ints, Ints, Ints, bool>(at::meta::max_pool2d_with_indices));
    add("max_pool2d_with_indices_backward",
        boxedMeta<T, T, Ints, Ints, Ints, Ints, bool, T>(at::meta::max_pool2d_with_indices_backward));
    add("avg_pool2d", boxedMeta<T, Ints, Ints, Ints, bool, bool, std::optional<int64_t>>(at::meta::avg_pool2d));
    add("avg_pool2d_backward",
        boxedMeta<T, T, Ints, Ints, Ints, bool, bool, std::optional<int64_t>>(at::meta::avg_pool2d_backward));
    add("max.dim", boxedMeta<T, int64_t, bool>(at::meta::max));
    add("min.dim", boxedMeta<T, int64_t, bool>(at::meta::min));
    add("native_layer_norm", boxedMeta(nativeLayerNormMeta));
    add("index_select", boxedMeta(indexSelectMeta));
    add("index_select.out", boxedMeta(indexSelectOutMeta));
    add("arange.start_out", boxedMeta(arangeOutMeta));
    add("eye.out", sizedBy(boxedMeta(squareEyeOutMeta), {0}));
    add("eye.m_out", sizedBy(boxedMeta(eyeOutMeta), {0, 1}));
    add("linspace.out", sizedBy(boxedMeta(linspaceOutMeta), {2}));
    add("all", boxedMeta<T>(at::meta::all));
    add("any", boxedMeta<T>(at::meta::any));
    add("all.dims", boxedMeta<T, at::OptionalIntArrayRef, bool>(at::meta::all));
    add("any.dims", boxedMeta<T, at::OptionalIntArrayRef, bool>(at::meta::any));
    using OptionalT = const std::optional<at::Tensor>&;
    add("clamp.Tensor", boxedMeta<T, OptionalT, OptionalT>(at::meta::clamp));
    add("clamp.Tensor_out", boxedMeta<T, OptionalT, OptionalT, at::Tensor&>(at::meta::clamp_outf));
    add("native_layer_norm_backward", boxedMeta(nativeLayerNormBackwardMeta));
    add("native_batch_norm", boxedMeta(nativeBatchNormMeta));
    add("native_batch_norm_backward", boxedMeta(nativeBatchNormBackwardMeta));
    add("native_group_norm", sizedBy(boxedMeta(nativeGroupNormMeta), {3, 4, 5}));
    add("native_group_norm_backward", sizedBy(boxedMeta(nativeGroupNormBackwardMeta), {5, 6, 7}));
    add("native_dropout_backward", boxedMeta(nativeDropoutBackwardMeta));
    add("_embedding_bag", boxedMeta(embeddingBagMeta));
    add("_embedding_bag_forward_only", boxedMeta(embeddingBagForwardOnlyMeta));
    add("_embedding_bag_backward", boxedMeta(embeddingBagBackwardMeta));
    // In place: the meta function checks the arguments against the tensor it writes, which the call returns.
    using W = at::Tensor&;
    addEach(Entries<InPlaceMetaFunction<W>>{
        {"zero_", at::meta::zero_}, {"exp_", at::meta::exp_}, {"log_", at::meta::log_},
        {"sqrt_", at::meta::sqrt_}, {"rsqrt_", at::meta::rsqrt_}, {"neg_", at::meta::neg_},
        {"reciprocal_", at::meta::reciprocal_}, {"sigmoid_", at::meta::sigmoid_}, {"tanh_", at::meta::tanh_},
        {"sin_", at::meta::sin_}, {"cos_", at::meta::cos_}, {"erf_", at::meta::erf_},
        {"floor_", at::meta::floor_}, {"log1p_", at::meta::log1p_}, {"expm1_", at::meta::expm1_}});
    addEach(Entries<InPlaceMetaFunction<W, S>>{
        {"fill_.Scalar", at::meta::fill_}, {"pow_.Scalar", at::meta::pow_},
        {"clamp_min_", at::meta::clamp_min_}, {"clamp_max_", at::meta::clamp_max_}});
    add("relu_", boxedMeta(reluMeta));
    add("scatter_add_", boxedMeta<W, int64_t, T, T>(at::meta::scatter_add_));
    add("scatter_.src", boxedMeta<W, int64_t, T, T>(at::meta::scatter_));
    add("scatter_.value", boxedMeta<W, int64_t, T, S>(at::meta::scatter_));
    add("index_add_", boxedMeta<W, int64_t, T, T, S>(at::meta::index_add_));
    add("_index_put_impl_", boxedMeta(indexPutMeta));
    add("index_fill_.int_Scalar", boxedMeta(indexFillMeta));
    add("_cummax_helper", boxedMeta(cumulativeHelperMeta));
    add("_cummin_helper", boxedMeta(cumulativeHelperMeta));
    add("sub_.Tensor", boxedMeta<W, T, S>(at::meta::sub_));
    add("div_.Tensor", boxedMeta<W, T>(at::meta::div_));
    add("div_.Tensor_mode", boxedMeta<W, T, std::optional<c10::string_view>>(at::meta::div_));
    add("pow_.Tensor", boxedMeta<W, T>(at::meta::pow_));
    add("lerp_.Scalar", boxedMeta<W, T, S>(at::meta::lerp_));
    add("addcdiv_", boxedMeta<W, T, T, S>(at::meta::addcdiv_));
    add("addcmul_", boxedMeta<W, T, T, S>(at::meta::addcmul_));
    add("clamp_", boxedMeta<W, const std::optional<at::Scalar>&, const std::optional<at::Scalar>&>(at::meta::clamp_));
    add("clamp_.Tensor", boxedMeta<W, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&>(at::meta::clamp_));
    // Random, in place: those whose meta functions check their numbers as CPU's kernels do, bernoulli_ and
    // uniform_. The numbers are drawn when the launch runs.
    add("normal_", boxedMeta<W, double, double, std::optional<at::Generator>>(at::meta::normal_));
    add("random_.from", boxedMeta<W, int64_t, std::optional<int64_t>, std::optional<at::Generator>>(at::meta::random_));
    add("random_.to", boxedMeta<W, int64_t, std::optional<at::Generator>>(at::meta::random_));
    add("random_", boxedMeta<W, std::optional<at::Generator>>(at::meta::random_));
    add("bernoulli_.float", boxedMeta(bernoulliMeta));
    add("uniform_", boxedMeta(uniformMeta));
    // The out= variants of the functional operators above: the meta function resizes an empty out= argument, which the plan then sizes.
    addEach(Entries<InPlaceMetaFunction<T, W>>{
        {"isneginf.out", at::meta::isneginf_outf}, {"isposinf.out", at::meta::isposinf_outf},
        {"acos.out", at::meta::acos_outf}, {"acosh.out", at::meta::acosh_outf},
        {"asin.out", at::meta::asin_outf}, {"asinh.out", at::meta::asinh_outf},
        {"atan.out", at::meta::atan_outf}, {"atanh.out", at::meta::atanh_outf},
        {"bitwise_not.out", at::meta::bitwise_not_outf}, {"ceil.out", at::meta::ceil_outf},
        {"cos.out", at::meta::cos_outf}, {"cosh.out", at::meta::cosh_outf},
        {"digamma.out", at::meta::digamma_outf}, {"erf.out", at::meta::erf_outf},
        {"erfc.out", at::meta::erfc_outf}, {"erfinv.out", at::meta::erfinv_outf},
        {"exp.out", at::meta::exp_outf}, {"exp2.out", at::meta::exp2_outf}, {"expm1.out", at::meta::expm1_outf},
        {"floor.out", at::meta::floor_outf}, {"frac.out", at::meta::frac_outf},
        {"hardsigmoid.out", at::meta::hardsigmoid_outf}, {"lgamma.out", at::meta::lgamma_outf},
        {"log.out", at::meta::log_outf}, {"log10.out", at::meta::log10_outf},
        {"log1p.out", at::meta::log1p_outf}, {"log2.out", at::meta::log2_outf},
        {"mish.out", at::meta::mish_outf}, {"neg.out", at::meta::neg_outf},
        {"reciprocal.out", at::meta::reciprocal_outf}, {"round.out", at::meta::round_outf},
        {"rsqrt.out", at::meta::rsqrt_outf}, {"sgn.out", at::meta::sgn_outf},
        {"sigmoid.out", at::meta::sigmoid_outf}, {"sign.out", at::meta::sign_outf},
        {"signbit.out", at::meta::signbit_outf}, {"silu.out", at::meta::silu_outf},
        {"sin.out", at::meta::sin_outf}, {"sinh.out", at::meta::sinh_outf}, {"sqrt.out", at::meta::sqrt_outf},
        {"tan.out", at::meta::tan_outf}, {"tanh.out", at::meta::tanh_outf},
        {"trunc.out", at::meta::trunc_outf}});
    addEach(Entries<InPlaceMetaFunction<T, T, W>>{
        {"atan2.out", at::meta::atan2_outf}, {"bitwise_and.Tensor_out", at::meta::bitwise_and_outf},
        {"bitwise_left_shift.Tensor_out", at::meta::bitwise_left_shift_outf},
        {"bitwise_or.Tensor_out", at::meta::bitwise_or_outf},
        {"bitwise_right_shift.Tensor_out", at::meta::bitwise_right_shift_outf},
        {"bitwise_xor.Tensor_out", at::meta::bitwise_xor_outf}, {"bmm.out", at::meta::bmm_outf},
        {"copysign.out", at::meta::copysign_outf}, {"div.out", at::meta::div_outf},
        {"eq.Tensor_out", at::meta::eq_outf}, {"fmax.out", at::meta::fmax_outf},
        {"fmin.out", at::meta::fmin_outf}, {"fmod.Tensor_out", at::meta::fmod_outf},
        {"ge.Tensor_out", at::meta::ge_outf}, {"gt.Tensor_out", at::meta::gt_outf},
        {"hardsigmoid_backward.grad_input", at::meta::hardsigmoid_backward_outf},
        {"heaviside.out", at::meta::heaviside_outf}, {"hypot.out", at::meta::hypot_outf},
        {"le.Tensor_out", at::meta::le_outf}, {"logaddexp.out", at::meta::logaddexp_outf},
        {"lt.Tensor_out", at::meta::lt_outf}, {"maximum.out", at::meta::maximum_outf},
        {"minimum.out", at::meta::minimum_outf}, {"mm.out", at::meta::mm_outf}, {"mul.out", at::meta::mul_outf},
        {"ne.Tensor_out", at::meta::ne_outf}, {"nextafter.out", at::meta::nextafter_outf},
        {"pow.Tensor_Tensor_out", at::meta::pow_outf}, {"remainder.Tensor_out", at::meta::remainder_outf},
        {"sigmoid_backward.grad_input", at::meta::sigmoid_backward_outf},
        {"silu_backward.grad_input", at::meta::silu_backward_outf},
        {"tanh_backward.grad_input", at::meta::tanh_backward_outf},
        {"xlogy.OutTensor", at::meta::xlogy_outf}});
    addEach(Entries<InPlaceMetaFunction<T, S, W>>{
        {"clamp_max.out", at::meta::clamp_max_outf}, {"clamp_min.out", at::meta::clamp_min_outf},
        {"eq.Scalar_out", at::meta::eq_outf}, {"ge.Scalar_out", at::meta::ge_outf},
        {"gt.Scalar_out", at::meta::gt_outf}, {"le.Scalar_out", at::meta::le_outf},
        {"leaky_relu.out", at::meta::leaky_relu_outf}, {"lt.Scalar_out", at::meta::lt_outf},
        {"ne.Scalar_out", at::meta::ne_outf}, {"pow.Tensor_Scalar_out", at::meta::pow_outf}});
    addEach(Entries<InPlaceMetaFunction<T, int64_t, bool, W>>{
        {"_log_softmax.out", at::meta::_log_softmax_outf}, {"_softmax.out", at::meta::_softmax_outf},
        {"all.out", at::meta::all_outf}, {"any.out", at::meta::any_outf}});
    addEach(Entries<InPlaceMetaFunction<T, T, S, W>>{
        {"add.out", at::meta::add_outf}, {"lerp.Scalar_out", at::meta::lerp_outf},
        {"sub.out", at::meta::sub_outf},
        {"threshold_backward.grad_input", at::meta::threshold_backward_outf}});
    add("addcdiv.out", boxedMeta<T, T, T, S, W>(at::meta::addcdiv_outf));
    add("addcmul.out", boxedMeta<T, T, T, S, W>(at::meta::addcmul_outf));
    add("addmm.out", boxedMeta<T, T, T, S, S, W>(at::meta::addmm_outf));
    add("baddbmm.out", boxedMeta<T, T, T, S, S, W>(at::meta::baddbmm_outf));
    add("amax.out", boxedMeta<T, at::IntArrayRef, bool, W>(at::meta::amax_outf));
    add("amin.out", boxedMeta<T, at::IntArrayRef, bool, W>(at::meta::amin_outf));
    add("argmax.out", boxedMeta<T, std::optional<int64_t>, bool, W>(at::meta::argmax_outf));
    add("argmin.out", boxedMeta<T, std::optional<int64_t>, bool, W>(at::meta::argmin_outf));
    add("cumprod.out", boxedMeta<T, int64_t, std::optional<at::ScalarType>, W>(at::meta::cumprod_outf));
    add("cumsum.out", boxedMeta<T, int64_t, std::optional<at::ScalarType>, W>(at::meta::cumsum_outf));
    add("mean.out", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>, W>(at::meta::mean_outf));
    add("sum.IntList_out", boxedMeta<T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>, W>(at::meta::sum_outf));
    add("scatter.src_out", boxedMeta<T, int64_t, T, T, W>(at::meta::scatter_outf));
    add("scatter_add.out", boxedMeta<T, int64_t, T, T, W>(at::meta::scatter_add_outf));
    add("softplus.out", boxedMeta<T, S, S, W>(at::meta::softplus_outf));
    add("threshold.out", boxedMeta<T, S, S, W>(at::meta::threshold_outf));
    add("tril.out", boxedMeta<T, int64_t, W>(at::meta::tril_outf));
    add("triu.out", boxedMeta<T, int64_t, W>(at::meta::triu_outf));
    add("_softmax_backward_data.out", boxedMeta<T, T, int64_t, at::ScalarType, W>(at::meta::_softmax_backward_data_outf));
    add("cat.out", boxedMeta<const at::ITensorListRef&, int64_t, W>(at::meta::cat_outf));
    add("clamp.out", boxedMeta<T, const std::optional<at::Scalar>&, const std::optional<at::Scalar>&, W>(at::meta::clamp_outf));
    add("elu.out", boxedMeta<T, S, S, S, W>(at::meta::elu_outf));
    add("elu_backward.grad_input", boxedMeta<T, S, S, S, bool, T, W>(at::meta::elu_backward_outf));
    add("gather.out", boxedMeta<T, int64_t, T, bool, W>(at::meta::gather_outf));
    add("gelu.out", boxedMeta<T, c10::string_view, W>(at::meta::gelu_outf));
    add("gelu_backward.grad_input", boxedMeta<T, T, c10::string_view, W>(at::meta::gelu_backward_outf));
    add("index.Tensor_out", boxedMeta<T, const c10::List<std::optional<at::Tensor>>&, W>(at::meta::index_outf));
    add("index_add.out", boxedMeta<T, int64_t, T, T, S, W>(at::meta::index_add_outf));
    add("leaky_relu_backward.grad_input", boxedMeta<T, T, S, bool, W>(at::meta::leaky_relu_backward_outf));
    add("mse_loss.out", boxedMeta<T, T, int64_t, W>(at::meta::mse_loss_outf));
    add("prod.int_out", boxedMeta<T, int64_t, bool, std::optional<at::ScalarType>, W>(at::meta::prod_outf));
    add("scatter.value_out", boxedMeta<T, int64_t, T, S, W>(at::meta::scatter_outf));
    add("softplus_backward.grad_input", boxedMeta<T, T, S, S, W>(at::meta::softplus_backward_outf));
    return t;
  }();
  return *table;
}

// Operators without a C++ meta function whose Meta kernel, called through the dispatcher (PyTorch's Python one,
// torch/_meta_registrations.py: slower than the table's), checks what CPU's kernel checks beyond the kernel
// key, so that their input errors are raised at the call. PyTorch's Python meta functions skip some checks of
// other operators (index_put_'s value shape, index_select's on a 0-dim tensor): only these, each compared with
// CPU's kernel on good and bad inputs (tests/test_async_execution.py).
bool hasDispatcherMeta(const c10::OperatorHandle& op, const std::string& name, const c10::IValue* args) {
  static const std::unordered_set<std::string> names = {
      "aten::where.self", "aten::where.self_out", "aten::masked_fill.Scalar", "aten::masked_fill.Tensor",
      "aten::masked_fill_.Scalar", "aten::masked_fill_.Tensor", "aten::logical_and.out", "aten::logical_or.out",
      "aten::logical_xor.out", "aten::logical_not.out", "aten::abs.out", "aten::isnan", "aten::nan_to_num",
      "aten::nan_to_num.out", "aten::flip", "aten::flip.out", "aten::roll", "aten::roll.out", "aten::std.correction",
      "aten::std.correction_out", "aten::dot", "aten::dot.out"};
  if (names.count(name) == 0 || !op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) return false;
  // An out= argument that is empty (as composites pass one: where, abs) or of the broadcast shape of the other
  // tensors (where into its own operand): resizing another one, the Python meta function would warn as CPU's
  // kernel does, twice in all.
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  c10::DimVector broadcast;
  try {
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (args[i].isTensor() && !arguments[i].is_out()) broadcast = at::infer_size_dimvector(broadcast, args[i].toTensor().sizes());
    }
  } catch (const std::exception&) {
    return false;  // they do not broadcast: the call runs, and raises CPU's error
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!arguments[i].is_out()) continue;
    const at::Tensor& out = args[i].toTensor();
    if (out.numel() != 0 && out.sizes() != c10::IntArrayRef(broadcast)) return false;
  }
  return true;
}

void runDispatcherMeta(const c10::OperatorHandle& op, HostKernelCall& call, const c10::IValue* args,
                       std::vector<at::Tensor>& outputs) {
  const size_t count = op.schema().arguments().size();
  torch::jit::Stack meta_stack;
  meta_stack.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& arg = args[i];
    if (arg.isTensor()) {
      meta_stack.emplace_back(call.metaOf(arg.toTensor()));
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> metas;
      for (const at::Tensor& t : arg.toTensorList()) metas.push_back(call.metaOf(t));
      meta_stack.emplace_back(std::move(metas));
    } else if (arg.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> metas;
      for (const std::optional<at::Tensor> t : arg.toOptionalTensorList()) {
        metas.push_back(t && t->defined() ? std::optional<at::Tensor>(call.metaOf(*t)) : t);
      }
      meta_stack.emplace_back(std::move(metas));
    } else if (arg.isGenerator()) {
      meta_stack.emplace_back();  // meta kernels draw nothing
    } else {
      meta_stack.push_back(arg);
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  for (const c10::IValue& output : meta_stack) outputs.push_back(output.toTensor());  // hasDispatcherMeta: tensors
}

}  // namespace

std::shared_ptr<LaunchPlan> planFromMeta(const c10::OperatorHandle& op, HostKernelCall& call, const c10::IValue* args,
                                         std::optional<FirstUse>& first_use) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name =
      schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
  const auto found = boxedMetas().find(name);
  const BoxedMeta* meta = found == boxedMetas().end() ? nullptr : &found->second;
  if (meta != nullptr && meta->arguments != schema.arguments().size()) return nullptr;
  if ((meta == nullptr && !hasDispatcherMeta(op, name, args)) || !call.mayPlanFromMeta()) return nullptr;
  KernelKey key(&schema);
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    // A Scalar's kind, not its value (arange's end); an int's value (a dimension), unless it is a size.
    if (meta != nullptr && (meta->size_arguments >> i & 1) != 0) continue;
    if (schema.arguments()[i].type()->kind() == c10::TypeKind::NumberType) {
      key.add(args[i].toScalar());
    } else {
      key.add(args[i]);
    }
  }
  return call.planFromMeta(
      std::move(key),
      [&](std::vector<at::Tensor>& outputs) {
        if (meta != nullptr) {
          meta->caller(meta->fn, args, call, outputs);
        } else {
          runDispatcherMeta(op, call, args, outputs);
        }
        return true;
      },
      std::vector<int>(schema.returns().size(), -1), first_use);
}

}  // namespace foo
