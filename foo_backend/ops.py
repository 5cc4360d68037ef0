r"""``foo_backend.ops``: the backend's own fused operators, in the ``torch.ops.foo`` namespace.

Each operator has a C++ kernel for foo tensors and one for CPU tensors (``csrc/CustomOps.cpp``, one
implementation registered for both), a fake implementation so ``torch.compile`` and
``torch.library.opcheck`` can trace it, and autograd where it is differentiable.

- ``rms_norm(input, weight, eps=1e-6)``: ``input / sqrt(mean(input**2, -1) + eps) * weight``, with autograd.
- ``add_gelu_(input, other)``: ``input = gelu(input + other)`` in place (exact GELU; ``other`` broadcasts).
- ``sgd_step_(params, grads, momentum_buffers, lr, momentum=0.0, weight_decay=0.0)``: one
  ``torch.optim.SGD`` step (no dampening, no Nesterov) for all parameters in one kernel; momentum
  buffers start as zeros.
"""
from typing import Sequence

import torch

__all__ = ["rms_norm", "add_gelu_", "sgd_step_"]


def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of ``input``; ``weight`` has that dimension's size."""
    return torch.ops.foo.rms_norm.default(input, weight, eps)


def add_gelu_(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``input = gelu(input + other)``, in place; returns ``input``."""
    torch.ops.foo.add_gelu_.default(input, other)
    return input


def sgd_step_(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
              momentum_buffers: Sequence[torch.Tensor], lr: float, momentum: float = 0.0,
              weight_decay: float = 0.0) -> None:
    """Update ``params`` (and ``momentum_buffers`` when ``momentum`` is not 0) in place."""
    torch.ops.foo.sgd_step_.default(list(params), list(grads), list(momentum_buffers), lr, momentum, weight_decay)


@torch.library.register_fake("foo::rms_norm")
def _rms_norm_fake(input, weight, eps):
    torch._check(weight.dim() == 1 and weight.shape[0] == input.shape[-1],
                 lambda: f"foo::rms_norm: weight must have shape [{input.shape[-1]}], got {list(weight.shape)}")
    return torch.empty_like(input, memory_format=torch.contiguous_format)


@torch.library.register_fake("foo::rms_norm_backward")
def _rms_norm_backward_fake(grad, input, weight, eps):
    return (torch.empty_like(input, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format))


@torch.library.register_fake("foo::add_gelu_")
def _add_gelu_fake(input, other):
    return None


@torch.library.register_fake("foo::sgd_step_")
def _sgd_step_fake(params, grads, momentum_buffers, lr, momentum, weight_decay):
    return None


def _rms_norm_setup_context(ctx, inputs, output):
    input, weight, eps = inputs
    ctx.save_for_backward(input, weight)
    ctx.eps = eps


def _rms_norm_backward(ctx, grad):
    input, weight = ctx.saved_tensors
    grad_input, grad_weight = torch.ops.foo.rms_norm_backward.default(grad, input, weight, ctx.eps)
    return grad_input, grad_weight, None


torch.library.register_autograd("foo::rms_norm", _rms_norm_backward, setup_context=_rms_norm_setup_context)
