// Capture and graphs (fooStreamBeginCapture/EndCapture/IsCapturing/GetCaptureId, fooGraph*), as CUDA's
// stream capture: while a stream captures, its launches are recorded into the capture's GraphNodes
// (stream_internal.h; the stream in stream.cpp records them) instead of run. A graph holds them; a
// graph launch queues them on a stream as one piece of work, after the graph's previous launch.
#include "foo_runtime.h"
#include "internal.h"
#include "stream_internal.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

struct fooGraph {
  std::shared_ptr<foo_runtime::GraphNodes> nodes;
  // Its launches, in the order the host made them: each runs after the one before, on whichever stream
  // (as CUDA orders the launches of one executable graph).
  std::shared_ptr<EventState> launches = std::make_shared<EventState>();
};

using namespace foo_runtime;

extern "C" {

fooError_t fooStreamBeginCapture(int device, fooStream_t stream) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  return streamBeginCapture(device, stream);
}

fooError_t fooStreamEndCapture(int device, fooStream_t stream, fooGraph_t* graph) {
  if (!validStream(device, stream) || graph == nullptr) return fooErrorInvalidValue;
  std::shared_ptr<GraphNodes> nodes;
  if (const fooError_t error = streamEndCapture(device, stream, &nodes); error != fooSuccess) return error;
  *graph = new fooGraph{std::move(nodes)};
  return fooSuccess;
}

fooError_t fooStreamIsCapturing(int device, fooStream_t stream, int* capturing) {
  if (!validStream(device, stream) || capturing == nullptr) return fooErrorInvalidValue;
  *capturing = streamCapturing(device, stream) ? 1 : 0;
  return fooSuccess;
}

fooError_t fooStreamGetCaptureId(int device, fooStream_t stream, unsigned long long* capture_id) {
  if (!validStream(device, stream) || capture_id == nullptr) return fooErrorInvalidValue;
  const std::shared_ptr<GraphNodes> graph = streamCaptureGraph(device, stream);
  *capture_id = graph != nullptr ? graph->capture_id : 0;
  return fooSuccess;
}

fooError_t fooGraphGetNodeCount(fooGraph_t graph, size_t* count) {
  if (graph == nullptr || count == nullptr) return fooErrorInvalidValue;
  *count = graph->nodes->nodes.size();
  return fooSuccess;
}

fooError_t fooGraphGetNodeName(fooGraph_t graph, size_t index, const char** name) {
  if (graph == nullptr || name == nullptr || index >= graph->nodes->nodes.size()) return fooErrorInvalidValue;
  *name = graph->nodes->nodes[index].name.c_str();
  return fooSuccess;
}

fooError_t fooGraphLaunch(fooGraph_t graph, int device, fooStream_t stream) {
  if (graph == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  TracedLaunch* traced = traceLaunch(device, stream, fooActivityKindKernel, "fooGraph", "fooGraphLaunch");
  if (streamCapturing(device, stream)) {
    // Recorded into the graph being captured, it runs at that graph's replays, not in this one's order.
    return launchClosure(device, stream, [nodes = graph->nodes] { nodes->run(); }, /*marker=*/false, traced);
  }
  std::shared_ptr<EventState> launches = graph->launches;
  uint64_t launch = 0;
  {
    std::lock_guard<std::mutex> lock(launches->mutex);
    launch = ++launches->recorded;
  }
  // The queued launch holds the nodes: destroying the graph meanwhile releases nothing it still needs.
  const fooError_t error = launchClosure(device, stream, [nodes = graph->nodes, launches, launch] {
    launches->waitFor(launch - 1);  // the graph's previous launch, on any stream, has run
    nodes->run();
    launches->complete(launch);
  }, /*marker=*/false, traced);
  if (error != fooSuccess) launches->complete(launch);  // nothing will run: later launches need not wait for it
  return error;
}

fooError_t fooSanitizerCheckGraphLaunch(fooGraph_t graph, int device, fooStream_t stream) {
  if (graph == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  return sanitizer::graphLaunched(graph->nodes->sanitized, graph->launches->sanitizer_clock, device, stream, true);
}

fooError_t fooSanitizerRecordGraphLaunch(fooGraph_t graph, int device, fooStream_t stream) {
  if (graph == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  return sanitizer::graphLaunched(graph->nodes->sanitized, graph->launches->sanitizer_clock, device, stream, false);
}

fooError_t fooGraphDestroy(fooGraph_t graph) {
  delete graph;
  return fooSuccess;
}

}  // extern "C"
