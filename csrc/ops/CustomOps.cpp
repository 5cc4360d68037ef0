// foo_backend.ops: the backend's own fused operators, in the `foo` operator namespace.
//
// Each operator has one implementation written against CPU tensors, registered for CPU and for foo.
// On foo it runs through HostKernelCall as every foo kernel does: outputs are allocated on the device
// first, then the implementation is queued on the current stream, to run on the kernel views of inputs and
// outputs (so it owns them: it captures them by value), and a graph can capture it.
// Fake (meta) implementations and autograd are registered from Python (foo_backend/ops.py).
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "execution/HostKernel.h"

namespace foo {
namespace {

// Hands an implementation its tensors: as they are in the CPU kernel, as kernel views in the foo kernel
// (which the dispatcher picks when any argument is a foo tensor).
template <bool kOnFoo>
class KernelLaunch {
 public:
  explicit KernelLaunch(const char* op) : call_(op) {}

  // A tensor the implementation reads; written(): one it writes (an output, or an argument it mutates).
  at::Tensor operator()(const at::Tensor& t) { return argument(t, HostKernelCall::TensorUse::kInput); }
  at::Tensor written(const at::Tensor& t) { return argument(t, HostKernelCall::TensorUse::kMutated); }
  std::vector<at::Tensor> operator()(at::TensorList ts) { return arguments(ts, HostKernelCall::TensorUse::kInput); }
  std::vector<at::Tensor> written(at::TensorList ts) { return arguments(ts, HostKernelCall::TensorUse::kMutated); }
  template <class Body>
  void run(Body&& body) {
    if (kOnFoo) {
      call_.queue(std::forward<Body>(body));
    } else {
      body();
    }
  }

 private:
  at::Tensor argument(const at::Tensor& t, HostKernelCall::TensorUse use) {
    return kOnFoo ? call_.argument(t, use) : t;  // a host tensor raises at run(): mixed devices
  }
  std::vector<at::Tensor> arguments(at::TensorList ts, HostKernelCall::TensorUse use) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const at::Tensor& t : ts) out.push_back(argument(t, use));
    return out;
  }
  HostKernelCall call_;
};

void checkRmsNormArgs(const char* op, const at::Tensor& input, const at::Tensor& weight) {
  TORCH_CHECK(input.dim() >= 1, op, ": input must have at least one dimension");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == input.size(-1), op, ": weight must have shape [",
              input.size(-1), "] (the last dimension of input), got ", weight.sizes());
  TORCH_CHECK(at::isFloatingType(input.scalar_type()) && weight.scalar_type() == input.scalar_type(), op,
              ": input and weight must have the same floating dtype, got ", input.scalar_type(), " and ",
              weight.scalar_type());
}

template <class T>
using Acc = at::opmath_type<T>;

// 1 / sqrt(mean(x^2) + eps) of one row, accumulated in float (or double).
template <class T>
Acc<T> inverseRms(const T* x, int64_t n, double eps) {
  Acc<T> sum_sq = 0;
  for (int64_t j = 0; j < n; ++j) sum_sq += Acc<T>(x[j]) * Acc<T>(x[j]);
  return Acc<T>(1) / std::sqrt(sum_sq / Acc<T>(n) + Acc<T>(eps));
}

// y = x / rms(x) * weight over the last dimension.
template <bool kOnFoo>
at::Tensor rmsNorm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  checkRmsNormArgs("foo::rms_norm", input, weight);
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  KernelLaunch<kOnFoo> launch("foo::rms_norm");
  at::Tensor x = launch(input), w = launch(weight), y = launch.written(output);
  launch.run([=]() mutable {
    const at::Tensor xc = x.contiguous(), wc = w.contiguous();
    const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "foo::rms_norm", [&] {
      const scalar_t* xp = xc.const_data_ptr<scalar_t>();
      const scalar_t* wp = wc.const_data_ptr<scalar_t>();
      scalar_t* yp = y.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const scalar_t* row = xp + r * n;
          const Acc<scalar_t> inv = inverseRms(row, n, eps);
          for (int64_t j = 0; j < n; ++j) yp[r * n + j] = scalar_t(Acc<scalar_t>(row[j]) * inv * Acc<scalar_t>(wp[j]));
        }
      });
    });
  });
  return output;
}

// Gradients of rms_norm: for each row with g = grad * weight and inv = 1 / rms(x),
// grad_input = inv * (g - x * inv^2 * mean(g * x)) and grad_weight = sum over rows of grad * x * inv.
template <bool kOnFoo>
std::tuple<at::Tensor, at::Tensor> rmsNormBackward(const at::Tensor& grad, const at::Tensor& input,
                                                   const at::Tensor& weight, double eps) {
  checkRmsNormArgs("foo::rms_norm_backward", input, weight);
  TORCH_CHECK(grad.sizes() == input.sizes(), "foo::rms_norm_backward: grad must have the input's shape ",
              input.sizes(), ", got ", grad.sizes());
  at::Tensor grad_input = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::Tensor grad_weight = at::empty_like(weight, at::MemoryFormat::Contiguous);
  KernelLaunch<kOnFoo> launch("foo::rms_norm_backward");
  at::Tensor g = launch(grad), x = launch(input), w = launch(weight);
  at::Tensor gx = launch.written(grad_input), gw = launch.written(grad_weight);
  launch.run([=]() mutable {
    const at::Tensor gc = g.contiguous(), xc = x.contiguous(), wc = w.contiguous();
    const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "foo::rms_norm_backward", [&] {
      using acc_t = Acc<scalar_t>;
      const scalar_t* gp = gc.const_data_ptr<scalar_t>();
      const scalar_t* xp = xc.const_data_ptr<scalar_t>();
      const scalar_t* wp = wc.const_data_ptr<scalar_t>();
      scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
      std::vector<acc_t> gw_acc(n, acc_t(0));
      for (int64_t r = 0; r < rows; ++r) {
        const scalar_t* xr = xp + r * n;
        const scalar_t* gr = gp + r * n;
        const acc_t inv = inverseRms(xr, n, eps);
        acc_t dot = 0;
        for (int64_t j = 0; j < n; ++j) dot += acc_t(gr[j]) * acc_t(wp[j]) * acc_t(xr[j]);
        const acc_t coef = inv * inv * dot / acc_t(n);
        for (int64_t j = 0; j < n; ++j) {
          gxp[r * n + j] = scalar_t(inv * (acc_t(gr[j]) * acc_t(wp[j]) - acc_t(xr[j]) * coef));
          gw_acc[j] += acc_t(gr[j]) * acc_t(xr[j]) * inv;
        }
      }
      scalar_t* gwp = gw.mutable_data_ptr<scalar_t>();
      for (int64_t j = 0; j < n; ++j) gwp[j] = scalar_t(gw_acc[j]);
    });
  });
  return {grad_input, grad_weight};
}

// self = gelu(self + other) in place (exact, erf-based GELU); other broadcasts to self.
template <bool kOnFoo>
void addGelu_(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && other.scalar_type() == self.scalar_type(),
              "foo::add_gelu_: self and other must have the same floating dtype, got ", self.scalar_type(), " and ",
              other.scalar_type());
  TORCH_CHECK(at::is_expandable_to(other.sizes(), self.sizes()), "foo::add_gelu_: other of shape ", other.sizes(),
              " does not broadcast to self of shape ", self.sizes());
  KernelLaunch<kOnFoo> launch("foo::add_gelu_");
  at::Tensor s = launch.written(self), o = launch(other);
  launch.run([=]() mutable {
    at::Tensor sc = s.contiguous();
    const at::Tensor oc = o.expand(s.sizes()).contiguous();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, s.scalar_type(), "foo::add_gelu_", [&] {
      using acc_t = Acc<scalar_t>;
      scalar_t* sp = sc.mutable_data_ptr<scalar_t>();
      const scalar_t* op = oc.const_data_ptr<scalar_t>();
      at::parallel_for(0, sc.numel(), 4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const acc_t v = acc_t(sp[i]) + acc_t(op[i]);
          sp[i] = scalar_t(acc_t(0.5) * v * (acc_t(1) + std::erf(v * acc_t(M_SQRT1_2))));
        }
      });
    });
    if (!sc.is_same(s)) s.copy_(sc);
  });
}

// One SGD step (PyTorch's torch.optim.SGD without dampening or Nesterov) for every parameter at once:
// g = grad + weight_decay * p; with momentum, buf = momentum * buf + g and g = buf; p -= lr * g.
// Momentum buffers start at zero, which makes the first step equal to SGD's buf = g.
template <bool kOnFoo>
void sgdStep_(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double lr,
              double momentum, double weight_decay) {
  const bool use_momentum = momentum != 0;
  TORCH_CHECK(grads.size() == params.size(), "foo::sgd_step_: got ", params.size(), " params but ", grads.size(),
              " grads");
  TORCH_CHECK(!use_momentum || momentum_buffers.size() == params.size(), "foo::sgd_step_: got ", params.size(),
              " params but ", momentum_buffers.size(), " momentum buffers");
  for (size_t i = 0; i < params.size(); ++i) {
    const bool ok = grads[i].sizes() == params[i].sizes() && grads[i].scalar_type() == params[i].scalar_type() &&
                    params[i].is_contiguous() && grads[i].is_contiguous() &&
                    (!use_momentum || (momentum_buffers[i].sizes() == params[i].sizes() &&
                                       momentum_buffers[i].scalar_type() == params[i].scalar_type() &&
                                       momentum_buffers[i].is_contiguous()));
    TORCH_CHECK(ok, "foo::sgd_step_: param ", i,
                ", its grad and its momentum buffer must be contiguous, of one shape and one dtype");
    TORCH_CHECK(at::isFloatingType(params[i].scalar_type()), "foo::sgd_step_: param ", i,
                " must be floating point, got ", params[i].scalar_type());
  }
  KernelLaunch<kOnFoo> launch("foo::sgd_step_");
  std::vector<at::Tensor> p = launch.written(params), g = launch(grads), b = launch.written(momentum_buffers);
  launch.run([=]() mutable {
    for (size_t i = 0; i < p.size(); ++i) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p[i].scalar_type(), "foo::sgd_step_", [&] {
        using acc_t = Acc<scalar_t>;
        scalar_t* pp = p[i].mutable_data_ptr<scalar_t>();
        const scalar_t* gp = g[i].const_data_ptr<scalar_t>();
        scalar_t* bp = use_momentum ? b[i].mutable_data_ptr<scalar_t>() : nullptr;
        const acc_t lr_ = acc_t(lr), momentum_ = acc_t(momentum), weight_decay_ = acc_t(weight_decay);
        for (int64_t j = 0, n = p[i].numel(); j < n; ++j) {
          acc_t d = acc_t(gp[j]) + weight_decay_ * acc_t(pp[j]);
          if (bp != nullptr) {
            d = momentum_ * acc_t(bp[j]) + d;
            bp[j] = scalar_t(d);
          }
          pp[j] = scalar_t(acc_t(pp[j]) - lr_ * d);
        }
      });
    }
  });
}

TORCH_LIBRARY(foo, m) {
  m.def("rms_norm(Tensor input, Tensor weight, float eps) -> Tensor");
  m.def("rms_norm_backward(Tensor grad, Tensor input, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("add_gelu_(Tensor(a!) self, Tensor other) -> ()");
  m.def(
      "sgd_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] momentum_buffers, float lr, float momentum, "
      "float weight_decay) -> ()");
}

// One implementation, two registrations: CPU tensors run it directly, foo tensors on the device.
template <bool kOnFoo>
void registerKernels(torch::Library& m) {
  m.impl("rms_norm", TORCH_FN(rmsNorm<kOnFoo>));
  m.impl("rms_norm_backward", TORCH_FN(rmsNormBackward<kOnFoo>));
  m.impl("add_gelu_", TORCH_FN(addGelu_<kOnFoo>));
  m.impl("sgd_step_", TORCH_FN(sgdStep_<kOnFoo>));
}

TORCH_LIBRARY_IMPL(foo, CPU, m) { registerKernels<false>(m); }
TORCH_LIBRARY_IMPL(foo, PrivateUse1, m) { registerKernels<true>(m); }

// The autograd kernel of the mutating operators, which have no derivative: like ATen's in-place
// operators they refuse to overwrite a leaf that requires grad, and bump the version counter of what
// they write, so autograd refuses to use a saved tensor they overwrote.
void mutatingOperatorAutograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  std::vector<at::Tensor> mutated;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].alias_info() == nullptr || !arguments[i].alias_info()->isWrite()) continue;
    const c10::IValue& arg = (*stack)[first + i];
    if (arg.isTensor()) mutated.push_back(arg.toTensor());
    if (arg.isTensorList()) {
      for (const at::Tensor& t : arg.toTensorList()) mutated.push_back(t);
    }
  }
  for (const at::Tensor& t : mutated) {
    TORCH_CHECK(!(c10::GradMode::is_enabled() && t.requires_grad() && t.is_leaf()),
                "a leaf Variable that requires grad is being used in an in-place operation.");
  }
  {
    const at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : mutated) t.unsafeGetTensorImpl()->bump_version();
}

// rms_norm's autograd is registered from Python; rms_norm_backward has no derivative of its own.
TORCH_LIBRARY_IMPL(foo, Autograd, m) {
  m.impl("rms_norm_backward", torch::autograd::autogradNotImplementedFallback());
  for (const char* op : {"add_gelu_", "sgd_step_"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&mutatingOperatorAutograd>());
  }
}

}  // namespace
}  // namespace foo
