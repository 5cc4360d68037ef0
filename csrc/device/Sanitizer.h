// torch.foo.sanitizer: the runtime's sanitizer (foo_runtime.h) fed with what each launch reads and writes,
// and its hazards raised (or warned) at the call that caused them, as PyTorch's CUDA sanitizer reports them:
// both operators, their streams, the tensor, and the Python stack of both sides.
//
// Every launch site declares its foo tensors through LaunchAccesses just before it launches; the caching
// allocator declares its allocations and frees. Off, a launch site pays one relaxed load (enabled()).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <memory>
#include <string>

#include "runtime/foo_runtime.h"

namespace foo::sanitizer {

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// How the bindings gather the caller's Python stack and print one (the device layer knows no Python).
using GatherStack = std::shared_ptr<c10::GatheredContext> (*)();
using FormatStack = std::string (*)(const c10::GatheredContext& stack);
void setStackFunctions(GatherStack gather, FormatStack format);

// Turns the sanitizer on (races; with check_initialization, reads of memory never written too) or off.
// With warn_only a hazard warns and the call goes on, else the call raises and launches nothing.
void enable(bool warn_only, bool check_initialization);
void disable();

struct LaunchContext;  // what a launch, allocation or free was: its name, stack and tensors (Sanitizer.cpp)
struct TensorDescription;  // one of its tensors

// The foo tensors a launch reads and writes (an in-place or out= argument is written).
class LaunchAccesses {
 public:
  LaunchAccesses();
  ~LaunchAccesses();
  LaunchAccesses(const LaunchAccesses&) = delete;
  LaunchAccesses& operator=(const LaunchAccesses&) = delete;

  void read(const at::Tensor& t) { add(t, false); }
  void write(const at::Tensor& t) { add(t, true); }
  void add(const at::Tensor& t, bool written);
  // Raw bytes at a device address (a storage's), described as a uint8 tensor.
  void bytes(const void* address, size_t count, bool written);
  // Checks the accesses as the next launch on `device`'s current stream, named `op`, and records them:
  // raises on a hazard (nothing is recorded), or warns and records them with warn_only.
  void check(c10::DeviceIndex device, const char* op);
  // Records them without checking (writes of memory allocated for the launch just before).
  void record(c10::DeviceIndex device, const char* op);

 private:
  void append(const fooMemoryAccess& access, TensorDescription description);
  void describe(const char* op);
  LaunchContext* context_ = nullptr;
  c10::SmallVector<fooMemoryAccess, 6> accesses_;
};

// A graph launch on `device`'s current stream: the launches its capture recorded, checked and recorded as one.
void checkGraphLaunch(fooGraph_t graph, c10::DeviceIndex device);

// The caching allocator's allocations and frees of device memory for `stream` (an allocation raises, or
// warns, when another stream's launch may still use the memory).
void allocated(c10::DeviceIndex device, fooStream_t stream, const void* address, size_t bytes);
void freed(c10::DeviceIndex device, fooStream_t stream, const void* address, size_t bytes);

}  // namespace foo::sanitizer
