// The boxed fallback: every ATen operator without a dedicated foo kernel runs its CPU kernel on foo memory.
#pragma once

namespace foo {

// An operator with both a CPU kernel and a composite one would run the composite on foo, since the
// dispatcher prefers it to a backend fallback: other results than CPU's (silu_backward in bfloat16),
// warnings twice (a structured operator's meta function runs for the functional and the out= call).
// This registers the fallback for every such operator, so foo runs the kernel CPU runs. Call it once,
// after foo's own kernels are registered.
void routeCompositeOperatorsToCpuKernels();

}  // namespace foo
