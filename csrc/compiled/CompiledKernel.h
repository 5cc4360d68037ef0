// Kernels that torch.compile (Inductor) generates for foo, launched as a GPU runtime launches kernels.
//
// Inductor writes C++ for each fused group of operators and compiles it into a shared library; foo's
// code generator adds an entry point that takes its arguments packed in one array (as CUDA's
// kernelParams): `extern "C" void foo_launch(const uint64_t* args)`. Each argument fills one 64-bit slot:
// a buffer's kernel-mapping address, or a scalar's value (an integer, or a double's or float's bits).
// A launch checks the arguments on the host, translates the device addresses, and queues the kernel on
// the current stream of the tensors' device, after the work already queued there; it returns at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace foo {

class CompiledKernel {
 public:
  using Entry = void (*)(const uint64_t* args);
  // The C type of each parameter as Inductor declares it ("const float*", "float*", "const int64_t", ...).
  CompiledKernel(std::string name, uintptr_t entry, const std::vector<std::string>& parameter_types);

  // One argument of a launch: a tensor for a pointer parameter, a number for a scalar one.
  struct Argument {
    at::Tensor tensor;
    bool is_floating = false;
    int64_t integer = 0;
    double floating = 0;
  };
  void launch(std::vector<Argument>&& arguments) const;

  const std::string& name() const { return name_; }

 private:
  enum class Kind : uint8_t { kPointer, kInt64, kInt32, kBool, kDouble, kFloat };

  std::string name_;
  Entry entry_;
  std::vector<Kind> kinds_;
  std::vector<bool> writes_;  // per parameter: a pointer to non-const memory, which the kernel writes
};

}  // namespace foo
