// The fused LSTM/GRU cells. ATen's RNN layers call them for accelerator tensors (as on CUDA), and CPU
// has no kernel for them, so foo composes them from foo operators. Each forward saves the activated
// gates in a workspace that its backward reads (the layout is private to this pair, as on CUDA).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace foo {
namespace {

at::Tensor withBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias && bias->defined() ? gates + *bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                        const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
                                                        const std::optional<at::Tensor>& hidden_bias) {
  const auto chunks = (withBias(input_gates, input_bias) + withBias(hidden_gates, hidden_bias)).chunk(4, 1);
  const at::Tensor in = chunks[0].sigmoid();
  const at::Tensor forget = chunks[1].sigmoid();
  const at::Tensor cell = chunks[2].tanh();
  const at::Tensor out = chunks[3].sigmoid();
  at::Tensor cy = forget * cx + in * cell;
  at::Tensor hy = out * cy.tanh();
  return {std::move(hy), std::move(cy), at::cat({in, forget, cell, out}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(const std::optional<at::Tensor>& grad_hy,
                                                                const std::optional<at::Tensor>& grad_cy,
                                                                const at::Tensor& cx, const at::Tensor& cy,
                                                                const at::Tensor& workspace, bool has_bias) {
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &in = gates[0], &forget = gates[1], &cell = gates[2], &out = gates[3];
  const at::Tensor tanh_cy = cy.tanh();
  const bool has_grad_hy = grad_hy && grad_hy->defined();
  at::Tensor grad_cell_state = grad_cy && grad_cy->defined() ? grad_cy->clone() : at::zeros_like(cy);
  at::Tensor grad_out = at::zeros_like(out);
  if (has_grad_hy) {
    grad_cell_state = grad_cell_state + *grad_hy * out * (1 - tanh_cy * tanh_cy);
    grad_out = *grad_hy * tanh_cy;
  }
  at::Tensor grad_gates = at::cat({grad_cell_state * cell * in * (1 - in), grad_cell_state * cx * forget * (1 - forget),
                                   grad_cell_state * in * (1 - cell * cell), grad_out * out * (1 - out)},
                                  1);
  at::Tensor grad_cx = grad_cell_state * forget;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                           const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                           const std::optional<at::Tensor>& hidden_bias) {
  const auto in_gates = withBias(input_gates, input_bias).chunk(3, 1);
  const auto hid_gates = withBias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset = (in_gates[0] + hid_gates[0]).sigmoid();
  const at::Tensor update = (in_gates[1] + hid_gates[1]).sigmoid();
  const at::Tensor& hidden_new = hid_gates[2];
  const at::Tensor candidate = (in_gates[2] + reset * hidden_new).tanh();
  at::Tensor hy = candidate + update * (hx - candidate);
  return {std::move(hy), at::cat({reset, update, candidate, hx, hidden_new}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(const at::Tensor& grad_hy,
                                                                                      const at::Tensor& workspace,
                                                                                      bool has_bias) {
  const auto saved = workspace.chunk(5, 1);
  const at::Tensor &reset = saved[0], &update = saved[1], &candidate = saved[2], &hx = saved[3], &hidden_new = saved[4];
  const at::Tensor grad_candidate = grad_hy * (1 - update) * (1 - candidate * candidate);
  const at::Tensor grad_update = grad_hy * (hx - candidate) * update * (1 - update);
  const at::Tensor grad_reset = grad_candidate * hidden_new * reset * (1 - reset);
  at::Tensor grad_input_gates = at::cat({grad_reset, grad_update, grad_candidate}, 1);
  at::Tensor grad_hidden_gates = at::cat({grad_reset, grad_update, grad_candidate * reset}, 1);
  at::Tensor grad_hx = grad_hy * update;
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
