#include "device/Sanitizer.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "device/Common.h"
#include "device/Stream.h"

namespace foo::sanitizer {

namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

struct TensorDescription {
  c10::SmallVector<int64_t, 4> sizes;
  int64_t storage_offset;
  c10::ScalarType dtype;
  bool written;
  bool raw = false;  // bytes of a storage, not a tensor
};

// A launch's, allocation's or free's description, shared by the runtime's records of it.
struct LaunchContext {
  std::atomic<int> references{1};
  std::string what;  // "aten::add", "an allocation of 512 bytes", ...
  std::shared_ptr<c10::GatheredContext> stack;
  c10::SmallVector<TensorDescription, 4> tensors;  // one per access, for a launch
};

namespace {

std::atomic<bool> g_warn_only{false};
GatherStack g_gather = nullptr;
FormatStack g_format = nullptr;

void* retain(void* context) {
  static_cast<LaunchContext*>(context)->references.fetch_add(1, std::memory_order_relaxed);
  return context;
}

// On any thread, under any lock: freeing a Python stack defers what needs the GIL (PyTorch's tracebacks do).
void release(void* context) {
  auto* c = static_cast<LaunchContext*>(context);
  if (c->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete c;
}

// Names a context and gathers the caller's stack.
void describe(LaunchContext* context, std::string what) {
  context->what = std::move(what);
  if (g_gather != nullptr) context->stack = g_gather();
}

LaunchContext* newContext(std::string what) {
  auto* context = new LaunchContext();
  describe(context, std::move(what));
  return context;
}

std::string streamName(c10::DeviceIndex device, fooStream_t stream) {
  const std::string name = "foo:" + std::to_string(static_cast<int>(device));
  return stream == 0 ? name + " (default stream)" : name + " stream " + std::to_string(stream);
}

std::string tensorName(const TensorDescription& t) {
  std::ostringstream out;
  if (t.raw) {
    out << "a storage of " << t.sizes[0] << " bytes";
    return out.str();
  }
  out << "a tensor of shape [";
  for (size_t i = 0; i < t.sizes.size(); ++i) out << (i ? ", " : "") << t.sizes[i];
  out << "], dtype torch." << c10::getDtypeNames(t.dtype).first << ", storage offset " << t.storage_offset;
  return out.str();
}

// "aten::add on foo:0 stream 3, which writes a tensor of shape [4], ..."
std::string side(const LaunchContext* c, size_t access, c10::DeviceIndex device, fooStream_t stream,
                 const char* tense) {
  std::ostringstream out;
  out << c->what << " on " << streamName(device, stream);
  if (access < c->tensors.size()) {
    const TensorDescription& t = c->tensors[access];
    out << ", which " << (t.written ? "write" : "read") << tense << " " << tensorName(t);
  }
  return out.str();
}

std::string stackOf(const LaunchContext* c, const char* whose) {
  std::string text = std::string("\nStack of ") + whose + " (" + c->what + "), most recent call last:\n";
  if (c->stack == nullptr || g_format == nullptr) return text + "  (no Python stack: not called from Python)\n";
  return text + g_format(*c->stack);
}

std::string report(const fooHazard& h) {
  const auto* here = static_cast<const LaunchContext*>(h.context);
  const auto* prior = static_cast<const LaunchContext*>(h.prior_context);
  const c10::DeviceIndex device = static_cast<c10::DeviceIndex>(h.device);
  const c10::DeviceIndex prior_device = static_cast<c10::DeviceIndex>(h.prior_device);
  char range[96];
  std::snprintf(range, sizeof(range), "%zu bytes at device address %p", h.bytes, h.address);
  std::ostringstream out;
  out << "foo sanitizer: ";
  switch (h.kind) {
    case fooHazardReadAfterWrite:
    case fooHazardWriteAfterRead:
    case fooHazardWriteAfterWrite:
      out << (h.kind == fooHazardReadAfterWrite   ? "read after write"
              : h.kind == fooHazardWriteAfterRead ? "write after read"
                                                  : "write after write")
          << " between two streams, with nothing ordering them (no wait_stream, event wait or synchronization "
             "between the two launches).\n  This call:   "
          << side(here, h.access, device, h.stream, "s") << "\n  Racing with: "
          << side(prior, h.prior_access, prior_device, h.prior_stream, "s") << ", launched earlier\n  on the same "
          << range << "." << stackOf(here, "this call") << stackOf(prior, "the earlier launch");
      break;
    case fooHazardUninitializedRead:
      out << "a read of memory never written since its allocation.\n  This call: "
          << side(here, h.access, device, h.stream, "s") << "\n  which reads " << range
          << " that nothing wrote." << stackOf(here, "this call");
      break;
    case fooHazardReuse: {
      const auto* free = static_cast<const LaunchContext*>(h.free_context);
      out << "memory freed while another stream may still use it is reused.\n  This allocation: " << here->what
          << " on " << streamName(device, h.stream) << ", which reuses " << range
          << "\n  Still in use by: " << side(prior, h.prior_access, prior_device, h.prior_stream, "s")
          << ", launched before the free and not ordered before this allocation (before freeing a tensor, "
             "record it on each other stream that uses it with Tensor.record_stream, or synchronize)."
          << stackOf(here, "this allocation");
      if (free != nullptr) out << stackOf(free, "the free");
      out << stackOf(prior, "the use still pending");
      break;
    }
  }
  return out.str();
}

// A sanitizer call's result: a hazard is raised, or with warn_only warned, and then `go_on()` records what
// the call refused to.
template <class GoOn>
void settle(fooError_t result, GoOn&& go_on, const char* note = "") {
  if (result != fooErrorHazard) {
    FOO_CHECK(result);
    return;
  }
  fooHazard hazard{};
  FOO_CHECK(fooSanitizerGetLastHazard(&hazard));
  const std::string message = report(hazard) + note;
  TORCH_CHECK(g_warn_only.load(std::memory_order_relaxed), message);
  TORCH_WARN(message);
  go_on();
}

}  // namespace

void setStackFunctions(GatherStack gather, FormatStack format) {
  g_gather = gather;
  g_format = format;
}

void enable(bool warn_only, bool check_initialization) {
  g_warn_only = warn_only;
  FOO_CHECK(fooSanitizerSetContextCallbacks(&retain, &release));
  FOO_CHECK(fooSanitizerEnable(fooSanitizerRaces | (check_initialization ? fooSanitizerInitialization : 0u)));
  detail::g_enabled = true;
}

void disable() {
  detail::g_enabled = false;
  FOO_CHECK(fooSanitizerEnable(0));
}

LaunchAccesses::LaunchAccesses() = default;

LaunchAccesses::~LaunchAccesses() {
  if (context_ != nullptr) release(context_);
}

void LaunchAccesses::add(const at::Tensor& t, bool written) {
  if (!t.defined() || !t.has_storage() || t.is_sparse() || t.device().type() != c10::kPrivateUse1) return;
  if (t.is_nested()) {  // its buffer, whole: a nested tensor has no strides
    bytes(t.storage().data(), t.storage().nbytes(), written);
    return;
  }
  if (t.numel() == 0) return;
  const int64_t itemsize = static_cast<int64_t>(t.itemsize());
  int64_t extent = 1;  // elements from the first to the last the tensor reaches
  for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
  const char* data = static_cast<const char*>(t.storage().data());
  const bool span = extent != t.numel();  // bytes between its elements: not all read
  append({data + t.storage_offset() * itemsize, static_cast<size_t>(extent * itemsize), written ? 1 : 0, span ? 1 : 0},
         {c10::SmallVector<int64_t, 4>(t.sizes().begin(), t.sizes().end()), t.storage_offset(), t.scalar_type(),
          written});
}

void LaunchAccesses::bytes(const void* address, size_t count, bool written) {
  if (count == 0) return;
  append({address, count, written ? 1 : 0, 0}, {{static_cast<int64_t>(count)}, 0, c10::kByte, written, /*raw=*/true});
}

void LaunchAccesses::append(const fooMemoryAccess& access, TensorDescription description) {
  accesses_.push_back(access);
  if (context_ == nullptr) context_ = new LaunchContext();
  context_->tensors.push_back(std::move(description));
}

void LaunchAccesses::describe(const char* op) {
  if (context_->what.empty()) sanitizer::describe(context_, op);  // else described by an earlier call
}

void LaunchAccesses::check(c10::DeviceIndex device, const char* op) {
  if (accesses_.empty()) return;
  describe(op);
  const fooStream_t stream = currentStream(device);
  settle(fooSanitizerCheckLaunch(device, stream, accesses_.data(), accesses_.size(), context_), [&] {
    FOO_CHECK(fooSanitizerRecordLaunch(device, stream, accesses_.data(), accesses_.size(), context_));
  });
}

void LaunchAccesses::record(c10::DeviceIndex device, const char* op) {
  if (accesses_.empty()) return;
  describe(op);
  FOO_CHECK(fooSanitizerRecordLaunch(device, currentStream(device), accesses_.data(), accesses_.size(), context_));
}

void checkGraphLaunch(fooGraph_t graph, c10::DeviceIndex device) {
  const fooStream_t stream = currentStream(device);
  settle(fooSanitizerCheckGraphLaunch(graph, device, stream),
         [&] { FOO_CHECK(fooSanitizerRecordGraphLaunch(graph, device, stream)); },
         "\n(This call replays a graph: \"this call\" is the launch it captured, with the stack of its capture.)");
}

void allocated(c10::DeviceIndex device, fooStream_t stream, const void* address, size_t bytes) {
  LaunchContext* context = newContext("an allocation of " + std::to_string(bytes) + " bytes");
  const fooError_t error = fooSanitizerAllocate(device, stream, address, bytes, context);
  release(context);
  settle(error, [] {});  // recorded, hazard or not
}

void freed(c10::DeviceIndex device, fooStream_t stream, const void* address, size_t bytes) {
  LaunchContext* context = newContext("the free of " + std::to_string(bytes) + " bytes");
  const fooError_t error = fooSanitizerFree(device, stream, address, bytes, context);
  release(context);
  FOO_CHECK(error);
}

}  // namespace foo::sanitizer
