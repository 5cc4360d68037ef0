// torch.foo.memory._snapshot(): the caching allocator's snapshot as the dictionary torch.cuda.memory._snapshot()
// returns (bindings/MemorySnapshot.cpp). For bindings/Module.cpp only: bindings/ is the pybind11 folder.
#pragma once

#include <pybind11/pytypes.h>

#include "device/CachingAllocator.h"

namespace foo {

// Symbolizes every recorded stack at once. Needs the GIL.
pybind11::dict snapshotToPython(const CachingAllocator::Snapshot& snapshot);

}  // namespace foo
