// Meta functions of boxed calls: a call of a signature not seen before (new shapes) is planned from its
// operator's meta function, on the host, and queued, as CUDA's kernels size their outputs on the host.
//
// From fastest to slowest, and by how much each is trusted: the C++ meta functions of structured operators
// (the ones CPU's kernels size their outputs with, so they check what the kernels check), called directly and
// not through the dispatcher, where PyTorch registers Python ones over most of them; meta functions written here
// for common kernels that have none in C++ (layer_norm, index_select, arange, eye), from PyTorch's own checks;
// and, for a listed few, the operator's Meta kernel through the dispatcher (PyTorch's Python one), where it
// checks what CPU's kernel checks. Each is verified against CPU's kernel at the first call of each kernel key
// (HostKernelCall::planFromMeta). FastOps.cpp has the unboxed operators' own (StructuredMeta).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>

#include "execution/HostKernel.h"
#include "execution/QueuedLaunch.h"

namespace foo {

// The plan of boxed call `args` of `op` from its operator's meta function (HostKernelCall::planFromMeta), or
// nullptr: none, or its kernel's first call with these dtypes and layouts, which `first_use` then describes.
std::shared_ptr<LaunchPlan> planFromMeta(const c10::OperatorHandle& op, HostKernelCall& call, const c10::IValue* args,
                                         std::optional<FirstUse>& first_use);

}  // namespace foo
