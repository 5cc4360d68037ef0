// foo's pinned (page-locked) host memory: Tensor.pin_memory(), DataLoader(pin_memory=True), and the
// host side of asynchronous copies.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace foo {

c10::Allocator* pinnedAllocator();
// Whether `ptr` lies in pinned host memory.
bool isPinned(const void* ptr);
// Keeps the pinned block behind `data` from being reused before the work now queued on `stream` is done.
void recordPinnedUse(const c10::DataPtr& data, c10::Stream stream);

}  // namespace foo
