// The boxed fallback: every ATen operator without a dedicated foo kernel runs its CPU kernel on foo memory.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

namespace foo {

// For a call whose arguments are on two devices, which raises CUDA's device error. CUDA's TensorIterator
// operators raise it only where TensorIterator compares devices: after its shape checks, and operand by
// operand beside the check that an output can hold the result's dtype (an integer tensor divided in place
// by a tensor of another device raises "result type Float can't be cast ..."). This runs the operator's
// meta kernel on the layouts of `args` (the call's arguments, `count` of them) and raises such a
// TensorIterator error, if it has one, in place of the device error.
void raiseChecksBeforeDevices(const c10::OperatorHandle& op, const c10::IValue* args, size_t count);

// An operator with both a CPU kernel and a composite one would run the composite on foo, since the
// dispatcher prefers it to a backend fallback: other results than CPU's (silu_backward in bfloat16),
// warnings twice (a structured operator's meta function runs for the functional and the out= call).
// This registers the fallback for every such operator, so foo runs the kernel CPU runs. Call it once,
// after foo's own kernels are registered.
void routeCompositeOperatorsToCpuKernels();

// Lets calls of `op_name` ("aten::nonzero") be learnt and queued although PyTorch tags its outputs as
// depending on values, so that tests can reach what a wrongly learnt signature does: its next queued
// call raises an asynchronous error, and the signature runs synchronously from then on.
void queueDespiteTags(const std::string& op_name, bool queue);

}  // namespace foo
