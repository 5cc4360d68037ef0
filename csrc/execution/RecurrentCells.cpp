// The fused LSTM/GRU cells. ATen's RNN layers call them for accelerator tensors (as on CUDA), and CPU
// has no kernel for them, so foo composes them from foo operators. Each forward saves the activated
// gates in a workspace that its backward reads (the layout is private to this pair, as on CUDA).
// Tensor methods rather than ATen's operator overloads (ATen/TensorOperators.h includes every ATen function:
// a third of this file's compile time).
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/zeros_like_ops.h>
#include <torch/library.h>

namespace foo {
namespace {

// 1 - t, as `1 - t` computes it (the same rounding: -t is exact).
at::Tensor oneMinus(const at::Tensor& t) { return t.neg().add_(1); }

at::Tensor cat(at::ITensorListRef tensors, int64_t dim) { return at::_ops::cat::call(tensors, dim); }

at::Tensor zerosLike(const at::Tensor& t) {
  return at::_ops::zeros_like::call(t, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
}

at::Tensor withBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias && bias->defined() ? gates.add(*bias) : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                        const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
                                                        const std::optional<at::Tensor>& hidden_bias) {
  const auto chunks = withBias(input_gates, input_bias).add(withBias(hidden_gates, hidden_bias)).chunk(4, 1);
  const at::Tensor in = chunks[0].sigmoid();
  const at::Tensor forget = chunks[1].sigmoid();
  const at::Tensor cell = chunks[2].tanh();
  const at::Tensor out = chunks[3].sigmoid();
  at::Tensor cy = forget.mul(cx).add(in.mul(cell));
  at::Tensor hy = out.mul(cy.tanh());
  return {std::move(hy), std::move(cy), cat({in, forget, cell, out}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(const std::optional<at::Tensor>& grad_hy,
                                                                const std::optional<at::Tensor>& grad_cy,
                                                                const at::Tensor& cx, const at::Tensor& cy,
                                                                const at::Tensor& workspace, bool has_bias) {
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &in = gates[0], &forget = gates[1], &cell = gates[2], &out = gates[3];
  const at::Tensor tanh_cy = cy.tanh();
  const bool has_grad_hy = grad_hy && grad_hy->defined();
  at::Tensor grad_cell_state = grad_cy && grad_cy->defined() ? grad_cy->clone() : zerosLike(cy);
  at::Tensor grad_out = zerosLike(out);
  if (has_grad_hy) {
    grad_cell_state = grad_cell_state.add(grad_hy->mul(out).mul(oneMinus(tanh_cy.mul(tanh_cy))));
    grad_out = grad_hy->mul(tanh_cy);
  }
  at::Tensor grad_gates = cat({grad_cell_state.mul(cell).mul(in).mul(oneMinus(in)),
                               grad_cell_state.mul(cx).mul(forget).mul(oneMinus(forget)),
                               grad_cell_state.mul(in).mul(oneMinus(cell.mul(cell))), grad_out.mul(out).mul(oneMinus(out))},
                              1);
  at::Tensor grad_cx = grad_cell_state.mul(forget);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                           const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                           const std::optional<at::Tensor>& hidden_bias) {
  const auto in_gates = withBias(input_gates, input_bias).chunk(3, 1);
  const auto hid_gates = withBias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset = in_gates[0].add(hid_gates[0]).sigmoid();
  const at::Tensor update = in_gates[1].add(hid_gates[1]).sigmoid();
  const at::Tensor& hidden_new = hid_gates[2];
  const at::Tensor candidate = in_gates[2].add(reset.mul(hidden_new)).tanh();
  at::Tensor hy = candidate.add(update.mul(hx.sub(candidate)));
  return {std::move(hy), cat({reset, update, candidate, hx, hidden_new}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(const at::Tensor& grad_hy,
                                                                                      const at::Tensor& workspace,
                                                                                      bool has_bias) {
  const auto saved = workspace.chunk(5, 1);
  const at::Tensor &reset = saved[0], &update = saved[1], &candidate = saved[2], &hx = saved[3], &hidden_new = saved[4];
  const at::Tensor grad_candidate = grad_hy.mul(oneMinus(update)).mul(oneMinus(candidate.mul(candidate)));
  const at::Tensor grad_update = grad_hy.mul(hx.sub(candidate)).mul(update).mul(oneMinus(update));
  const at::Tensor grad_reset = grad_candidate.mul(hidden_new).mul(reset).mul(oneMinus(reset));
  at::Tensor grad_input_gates = cat({grad_reset, grad_update, grad_candidate}, 1);
  at::Tensor grad_hidden_gates = cat({grad_reset, grad_update, grad_candidate.mul(reset)}, 1);
  at::Tensor grad_hx = grad_hy.mul(update);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {std::move(grad_input_gates), std::move(grad_hidden_gates), std::move(grad_hx), std::move(grad_input_bias),
          std::move(grad_hidden_bias)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstmCellBackward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gruCellBackward));
}

}  // namespace
}  // namespace foo
