// Graph capture and replay on foo (FooGraph.cpp).
#pragma once

#include <c10/core/Allocator.h>

namespace foo {

// Registers foo's at::GraphImplInterface, for torch.accelerator.Graph; called once PrivateUse1 is renamed.
void registerGraphImpl();
// A memory pool id graphs can share (torch.foo.graph_pool_handle).
c10::MempoolId_t newGraphPoolHandle();
// Whether the current stream of the current device is capturing a graph.
bool currentStreamIsCapturing();

}  // namespace foo
