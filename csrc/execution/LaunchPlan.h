// What lets a host kernel run asynchronously: its outputs' metadata, known before it runs.
//
// A GPU kernel is queued once the host knows the shapes of its outputs; ours run PyTorch's CPU kernels,
// which compute output shapes while they run. So a call is first run synchronously, and its outputs'
// metadata are remembered under the call's *signature* (operator, every tensor's dtype, shape, strides
// and aliasing, every other argument's value). A later call with the same signature, whose outputs
// therefore have the same metadata, gets its outputs allocated on the host and its kernel queued on
// the stream. Operators tagged as having data-dependent outputs and calls with host tensors always run
// synchronously.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DefaultDtype.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "execution/TensorLayout.h"

namespace foo {

// The words identifying a call; a call that cannot run asynchronously has none.
class LaunchSignature {
 public:
  explicit LaunchSignature(const void* op) {
    words_.push_back(reinterpret_cast<intptr_t>(op));
    // The one process-wide setting that changes outputs' metadata: the default dtype (the dtype of an
    // integer division, or of an integer tensor times a Python float).
    words_.push_back(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  }

  // A foo tensor argument: `slot` is its position among the call's distinct tensors, `storage_slot`
  // the first of them with the same storage (aliasing changes what a kernel may do).
  void tensor(const at::Tensor& t, size_t slot, size_t storage_slot);
  void undefinedTensor() { word(kUndefined); }
  // A 0-dim CPU tensor: its dtype (and whether it is a wrapped Python number) decides type promotion.
  void hostScalar(c10::ScalarType dtype, bool wrapped_number) { word(kHostScalar, static_cast<int64_t>(dtype) * 2 + wrapped_number); }

  void add(const c10::IValue& value);
  void add(const c10::Scalar& value);
  void add(int64_t value) { word(kInt, value); }
  void add(bool value) { word(kBool, value); }
  void add(double value);
  void add(const c10::SymInt& value);
  void add(c10::ScalarType value) { word(kInt, static_cast<int64_t>(value)); }
  void add(c10::IntArrayRef values);
  void add(c10::SymIntArrayRef values);
  void add(at::OptionalIntArrayRef values);
  void add(std::string_view value);
  template <size_t N>
  void add(const std::array<bool, N>& values) {
    for (bool v : values) add(v);
  }
  template <class T>
  void add(const std::optional<T>& value) {
    if (value) {
      add(*value);
    } else {
      word(kNone);
    }
  }

  void forbid() { allowed_ = false; }
  bool allowed() const { return allowed_; }
  c10::ArrayRef<int64_t> words() const { return words_; }

 private:
  enum Tag : int64_t { kUndefined = 1, kTensor, kNone, kInt, kBool, kDouble, kComplex, kList, kString, kDevice, kHostScalar };
  template <class T>
  void addList(const c10::List<T>& values);
  void word(int64_t tag) { words_.push_back(tag); }
  void word(int64_t tag, int64_t value) {
    words_.push_back(tag);
    words_.push_back(value);
  }

  c10::SmallVector<int64_t, 48> words_;  // on the stack: a call's signature allocates nothing
  bool allowed_ = true;
};

// The outputs a call with a given signature returned.
struct LaunchPlan {
  struct Output {
    enum Kind { kUndefined, kArgument, kFresh } kind;
    size_t argument = 0;  // kArgument: the position of the tensor argument returned
    TensorLayout layout;  // kFresh: a new tensor with its own storage of `layout.storage_nbytes`
  };
  std::vector<Output> outputs;
  std::vector<int> structure;  // how the caller groups the flat outputs (its returns' list lengths)
  std::string kernel_name;     // the queued kernel's name in a profile: "<operator> kernel"
  // Set when a queued run returned other metadata than the plan's: the signature runs synchronously
  // from then on.
  std::atomic<bool> stale{false};
};

// The plan learnt for `signature` on this thread, or nullptr.
std::shared_ptr<LaunchPlan> findLaunchPlan(const LaunchSignature& signature);
void rememberLaunchPlan(const LaunchSignature& signature, std::shared_ptr<LaunchPlan> plan);

}  // namespace foo
