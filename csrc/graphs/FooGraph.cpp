// Graphs for foo: PyTorch's generic graph interface (at::GraphImplInterface, behind torch.accelerator.Graph
// and torch.foo.FooGraph) over the runtime's stream capture. Capture records every launch made on the
// capturing stream, operators' kernels, copies, compiled kernels, with its outputs allocated from the graph's
// memory pool; replay queues the recorded launches on the current stream again, with no host dispatch.
#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceType.h>

#include <atomic>
#include <fstream>

#include "device/CachingAllocator.h"
#include "device/Common.h"
#include "device/Generator.h"
#include "device/Sanitizer.h"
#include "device/Stream.h"
#include "graphs/FooGraph.h"

namespace foo {
namespace {

std::atomic<uint64_t> g_next_pool_id{1};

class FooGraphImpl final : public at::GraphImplInterface {
 public:
  explicit FooGraphImpl(const at::GraphImplArgs& /*args*/) {}
  ~FooGraphImpl() override { reset(); }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode /*mode*/) override {
    TORCH_CHECK(!capturing_ && graph_ == nullptr,
                "foo graph: this graph already holds a capture; call reset() before capturing again");
    device_ = currentDevice();
    stream_ = currentStream(device_);
    TORCH_CHECK(stream_ != 0,
                "foo graph: capture on the default stream is not allowed (as on CUDA): capture on another stream, "
                "e.g. inside torch.foo.graph(...) or `with torch.foo.stream(torch.foo.Stream()):`");
    FOO_CHECK(fooStreamBeginCapture(device_, stream_));
    FOO_CHECK(fooStreamGetCaptureId(device_, stream_, &capture_id_));
    // A pool of its own, unless told to share another graph's (graph_pool_handle() or graph.pool()).
    pool_ = pool.first != 0 || pool.second != 0 ? pool : c10::MempoolId_t{g_next_pool_id.fetch_add(1), 0};
    cachingAllocator().beginAllocateToPool(device_, pool_, capture_id_);
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "foo graph: capture_end() without capture_begin()");
    TORCH_CHECK(currentDevice() == device_ && currentStream(device_) == stream_,
                "foo graph: capture must end on the stream that began it (foo:", static_cast<int>(device_),
                ", stream ", stream_, ")");
    fooGraph_t graph = nullptr;
    const fooError_t error = fooStreamEndCapture(device_, stream_, &graph);
    cachingAllocator().endAllocateToPool(device_, pool_);
    capturing_ = false;
    draws_random_numbers_ = takeCapturedDraws(capture_id_);
    FOO_CHECK(error);
    graph_ = graph;
    size_t count = 0;
    FOO_CHECK(fooGraphGetNodeCount(graph_, &count));
    // As CUDA's: work launched elsewhere than on the capturing stream is the usual cause.
    if (count == 0) {
      TORCH_WARN("The foo graph is empty. This usually means that the graph was attempted to be captured on the "
                 "wrong device or stream.");
    }
  }

  // A foo graph needs no instantiation: a replay queues the recorded launches.
  void instantiate() override { TORCH_CHECK(graph_ != nullptr, "foo graph: nothing captured to instantiate"); }

  void replay() override {
    TORCH_CHECK(graph_ != nullptr, "foo graph: replay() needs a captured graph (capture_begin/capture_end first)");
    const fooStream_t stream = currentStream(device_);
    if (sanitizer::enabled()) sanitizer::checkGraphLaunch(graph_, device_);
    FOO_CHECK(fooGraphLaunch(graph_, device_, stream));
    if (draws_random_numbers_) noteLaunchedDraws(device_, stream);
  }

  void reset() override {
    if (capturing_) {  // a capture abandoned half-way (an error inside it)
      fooGraph_t partial = nullptr;
      if (fooStreamEndCapture(device_, stream_, &partial) == fooSuccess) fooGraphDestroy(partial);
      cachingAllocator().endAllocateToPool(device_, pool_);
      takeCapturedDraws(capture_id_);
      capturing_ = false;
      graph_ = nullptr;
    }
    if (graph_ != nullptr) {
      fooGraphDestroy(graph_);
      graph_ = nullptr;
      draws_random_numbers_ = false;
    }
    if (pool_.first != 0 || pool_.second != 0) {
      cachingAllocator().releasePool(device_, pool_);
      pool_ = {0, 0};
    }
  }

  c10::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  // The recorded launches, one per line.
  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "foo graph: call enable_debug_mode() before capturing, to debug_dump()");
    TORCH_CHECK(graph_ != nullptr, "foo graph: nothing captured to dump");
    size_t count = 0;
    FOO_CHECK(fooGraphGetNodeCount(graph_, &count));
    std::ofstream out(path);
    TORCH_CHECK(out, "foo graph: cannot write ", path);
    out << "foo graph on foo:" << static_cast<int>(device_) << ", " << count << " launches\n";
    for (size_t i = 0; i < count; ++i) {
      const char* name = nullptr;
      FOO_CHECK(fooGraphGetNodeName(graph_, i, &name));
      out << i << " " << name << "\n";
    }
  }

 private:
  c10::DeviceIndex device_ = 0;
  fooStream_t stream_ = 0;
  unsigned long long capture_id_ = 0;  // the runtime's id of the capture (its streams allocate from pool_)
  c10::MempoolId_t pool_{0, 0};
  fooGraph_t graph_ = nullptr;
  bool capturing_ = false;
  bool draws_random_numbers_ = false;  // it captured random operators (see Generator.h)
  bool debug_ = false;
};

}  // namespace

void registerGraphImpl() {
  // The registry's key is the device type's name, which is "FOO" only once PrivateUse1 is renamed.
  const std::string key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
  if (!at::GraphImplRegistry()->Has(key)) {
    at::GraphImplRegistry()->Register(
        key, [](const at::GraphImplArgs& args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<FooGraphImpl>(args);
        });
  }
}

c10::MempoolId_t newGraphPoolHandle() { return {0, g_next_pool_id.fetch_add(1)}; }

bool currentStreamIsCapturing() {
  const c10::DeviceIndex device = currentDevice();
  int capturing = 0;
  FOO_CHECK(fooStreamIsCapturing(device, currentStream(device), &capturing));
  return capturing != 0;
}

}  // namespace foo
