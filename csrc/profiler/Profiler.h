// foo in torch.profiler: its device timeline (KinetoPlugin.cpp) and event stubs (EventStubs.cpp).
#pragma once

namespace foo {

// Registers foo's device tracer with Kineto, PyTorch's profiler library (once, at load).
void registerProfiler();
// Registers the device-event stubs torch.autograd.profiler(use_device="foo") times operators with.
void registerProfilerEventStubs();

}  // namespace foo
