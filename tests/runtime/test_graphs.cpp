// Runtime tests: stream capture and graphs.
#include "harness.h"

namespace runtime_tests {
namespace {

// A captured launch's argument: counts its runs and its release.
struct Counted {
  std::vector<int>* order;
  int value;
  int* released;
  static void run(void* arg) {
    auto* c = static_cast<Counted*>(arg);
    c->order->push_back(c->value);
  }
  static void release(void* arg) { ++*static_cast<Counted*>(arg)->released; }
};

RUNTIME_TEST(a_graph_records_launches_and_replays_them_in_order) {
  std::vector<int> order;
  int released = 0;
  Counted first{&order, 1, &released}, second{&order, 2, &released};
  fooStream_t stream = 0;
  EXPECT_OK(fooStreamCreate(0, &stream, 0));
  EXPECT_OK(fooStreamBeginCapture(0, stream));
  int capturing = 0;
  EXPECT_OK(fooStreamIsCapturing(0, stream, &capturing));
  EXPECT(capturing == 1);
  EXPECT_OK(fooLaunchKernelEx(0, stream, &Counted::run, &first, &Counted::release, fooActivityKindKernel, "one"));
  EXPECT_OK(fooLaunchKernelEx(0, stream, &Counted::run, &second, &Counted::release, fooActivityKindMemcpy, nullptr));
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, stream, &graph));
  EXPECT_OK(fooStreamIsCapturing(0, stream, &capturing));
  EXPECT(capturing == 0);
  EXPECT(order.empty());  // captured, not run
  size_t nodes = 0;
  EXPECT_OK(fooGraphGetNodeCount(graph, &nodes));
  EXPECT(nodes == 2);
  uint64_t launched = 0;
  EXPECT_OK(fooStreamGetLaunchCount(0, stream, &launched));
  EXPECT(launched == 0);
  // Replays, on the capturing stream and on another one, run the work again, in order.
  EXPECT_OK(fooGraphLaunch(graph, 0, stream));
  EXPECT_OK(fooGraphLaunch(graph, 1, 0));  // a graph of launches on foo:0, run by a stream of foo:1
  EXPECT_OK(fooStreamSynchronize(0, stream));
  EXPECT_OK(fooDeviceSynchronize(1));
  EXPECT((order == std::vector<int>{1, 2, 1, 2}));
  EXPECT(released == 0);
  EXPECT_OK(fooGraphDestroy(graph));
  EXPECT(released == 2);  // each captured argument, once
}

// A graph node that notes whether the gate its test holds was open when it ran.
struct SeesGate {
  std::atomic<bool>* opened;
  std::vector<bool>* seen;
  static void run(void* arg) {
    auto* s = static_cast<SeesGate*>(arg);
    s->seen->push_back(s->opened->load());
  }
  static void release(void*) {}
};

RUNTIME_TEST(launches_of_one_graph_run_in_order_whatever_their_streams) {
  std::atomic<bool> opened{false};
  std::vector<bool> seen;  // written by one replay at a time: they run in order
  SeesGate node{&opened, &seen};
  fooStream_t first = 0, second = 0;
  EXPECT_OK(fooStreamCreate(0, &first, 0));
  EXPECT_OK(fooStreamCreate(0, &second, 0));
  EXPECT_OK(fooStreamBeginCapture(0, first));
  EXPECT_OK(fooLaunchKernelEx(0, first, &SeesGate::run, &node, &SeesGate::release, fooActivityKindKernel, nullptr));
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, first, &graph));
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, first, &Gate::wait, &gate));
  EXPECT_OK(fooGraphLaunch(graph, 0, first));   // held behind the gate
  EXPECT_OK(fooGraphLaunch(graph, 0, second));  // an idle stream: runs only after the launch before
  EXPECT_OK(fooGraphLaunch(graph, 1, 0));       // another device's stream too
  opened = true;
  gate.open.set_value();
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT_OK(fooDeviceSynchronize(1));
  EXPECT((seen == std::vector<bool>{true, true, true}));
  EXPECT_OK(fooGraphDestroy(graph));
}

RUNTIME_TEST(a_destroyed_graph_keeps_what_a_queued_replay_needs) {
  std::vector<int> order;
  int released = 0;
  Counted node{&order, 7, &released};
  EXPECT_OK(fooStreamBeginCapture(0, 0));
  EXPECT_OK(fooLaunchKernelEx(0, 0, &Counted::run, &node, &Counted::release, fooActivityKindKernel, nullptr));
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, 0, &graph));
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
  EXPECT_OK(fooGraphLaunch(graph, 0, 0));
  EXPECT_OK(fooGraphDestroy(graph));
  EXPECT(released == 0 && order.empty());  // the queued replay still holds the work
  gate.open.set_value();
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT((order == std::vector<int>{7}) && released == 1);
}

RUNTIME_TEST(a_capturing_stream_refuses_what_would_wait_for_it_or_add_host_work) {
  fooStream_t stream = 0, other = 0;
  EXPECT_OK(fooStreamCreate(0, &stream, 0));
  EXPECT_OK(fooStreamCreate(0, &other, 0));
  EXPECT_OK(fooStreamBeginCapture(0, stream));
  EXPECT(fooStreamBeginCapture(0, stream) == fooErrorStreamCaptureUnsupported);  // already capturing
  EXPECT(fooStreamSynchronize(0, stream) == fooErrorStreamCaptureUnsupported);
  EXPECT(fooStreamQuery(0, stream) == fooErrorStreamCaptureUnsupported);
  EXPECT(fooDeviceSynchronize(0) == fooErrorStreamCaptureUnsupported);
  EXPECT(fooStreamRunSynchronous(0, stream, &nothing, nullptr, fooActivityKindKernel, nullptr) ==
         fooErrorStreamCaptureUnsupported);
  EXPECT(fooLaunchKernel(0, stream, &nothing, nullptr) == fooErrorStreamCaptureUnsupported);  // no release
  fooEvent_t event = nullptr, point = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  EXPECT_OK(fooEventCreate(&point, 0));
  EXPECT_OK(fooEventRecord(event, 0, other));  // other streams and devices work as usual
  EXPECT(fooStreamWaitEvent(0, stream, event) == fooErrorStreamCaptureUnsupported);  // not in the capture
  EXPECT_OK(fooEventRecord(point, 0, stream));  // a point of the graph, which the host cannot wait for
  EXPECT(fooEventQuery(point) == fooErrorStreamCaptureUnsupported);
  EXPECT(fooEventSynchronize(point) == fooErrorStreamCaptureUnsupported);
  EXPECT_OK(fooStreamSynchronize(0, other));
  EXPECT_OK(fooDeviceSynchronize(1));
  EXPECT(std::strcmp(fooGetErrorString(fooErrorStreamCaptureUnsupported),
                     "operation not permitted when stream is capturing") == 0);
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, stream, &graph));
  EXPECT(fooStreamEndCapture(0, stream, &graph) == fooErrorInvalidValue);  // not capturing any more
  EXPECT_OK(fooStreamSynchronize(0, stream));
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT_OK(fooEventQuery(point));  // never recorded outside a capture
  EXPECT_OK(fooGraphDestroy(graph));
  EXPECT_OK(fooEventDestroy(event));
  EXPECT_OK(fooEventDestroy(point));
}

RUNTIME_TEST(a_stream_waiting_on_an_event_of_a_capture_joins_it_until_the_capture_ends) {
  std::vector<int> order;
  int released = 0;
  Counted first{&order, 1, &released}, forked{&order, 2, &released}, joined{&order, 3, &released};
  fooStream_t origin = 0, side = 0, busy = 0;
  EXPECT_OK(fooStreamCreate(0, &origin, 0));
  EXPECT_OK(fooStreamCreate(0, &side, 0));
  EXPECT_OK(fooStreamCreate(0, &busy, 0));
  fooEvent_t fork = nullptr, join = nullptr;
  EXPECT_OK(fooEventCreate(&fork, 0));
  EXPECT_OK(fooEventCreate(&join, 0));
  EXPECT_OK(fooStreamBeginCapture(0, origin));
  EXPECT_OK(fooLaunchKernelEx(0, origin, &Counted::run, &first, &Counted::release, fooActivityKindKernel, nullptr));
  EXPECT_OK(fooEventRecord(fork, 0, origin));
  EXPECT(fooStreamWaitEvent(1, 0, fork) == fooErrorInvalidValue);  // a graph runs on one device
  EXPECT_OK(fooStreamWaitEvent(0, side, fork));                    // side joins the capture
  unsigned long long origin_id = 0, side_id = 0;
  EXPECT_OK(fooStreamGetCaptureId(0, origin, &origin_id));
  EXPECT_OK(fooStreamGetCaptureId(0, side, &side_id));
  EXPECT(origin_id != 0 && side_id == origin_id);
  EXPECT_OK(fooLaunchKernelEx(0, side, &Counted::run, &forked, &Counted::release, fooActivityKindKernel, nullptr));
  EXPECT(fooStreamSynchronize(0, side) == fooErrorStreamCaptureUnsupported);
  EXPECT_OK(fooStreamBeginCapture(0, busy));  // a stream capturing another graph cannot join this one
  EXPECT(fooStreamWaitEvent(0, busy, fork) == fooErrorStreamCaptureUnsupported);
  fooGraph_t other = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, busy, &other));
  EXPECT_OK(fooEventRecord(join, 0, side));
  EXPECT_OK(fooStreamWaitEvent(0, origin, join));  // the capture's own point: nothing to do
  EXPECT_OK(fooLaunchKernelEx(0, origin, &Counted::run, &joined, &Counted::release, fooActivityKindKernel, nullptr));
  EXPECT(order.empty());  // recorded, not run
  fooGraph_t graph = nullptr;
  EXPECT(fooStreamEndCapture(0, side, &graph) == fooErrorInvalidValue);  // only the stream that began it ends it
  EXPECT_OK(fooStreamEndCapture(0, origin, &graph));
  EXPECT_OK(fooStreamGetCaptureId(0, side, &side_id));
  EXPECT(side_id == 0);
  EXPECT_OK(fooStreamSynchronize(0, side));  // side is an ordinary stream again
  size_t count = 0;
  EXPECT_OK(fooGraphGetNodeCount(graph, &count));
  EXPECT(count == 3);
  EXPECT_OK(fooGraphLaunch(graph, 0, side));
  EXPECT_OK(fooGraphLaunch(graph, 0, side));
  EXPECT_OK(fooStreamSynchronize(0, side));
  EXPECT((order == std::vector<int>{1, 2, 3, 1, 2, 3}));
  EXPECT_OK(fooGraphDestroy(graph));
  EXPECT_OK(fooGraphDestroy(other));
  EXPECT(released == 3);
  EXPECT_OK(fooEventDestroy(fork));
  EXPECT_OK(fooEventDestroy(join));
}

RUNTIME_TEST(graph_replays_are_traced_as_one_piece_of_work) {
  std::vector<int> order;
  int released = 0;
  Counted node{&order, 1, &released};
  EXPECT_OK(fooActivityEnable(1));
  EXPECT_OK(fooStreamBeginCapture(0, 0));
  EXPECT_OK(fooLaunchKernelEx(0, 0, &Counted::run, &node, &Counted::release, fooActivityKindKernel, "node"));
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, 0, &graph));
  EXPECT_OK(fooGraphLaunch(graph, 0, 0));
  EXPECT_OK(fooDeviceSynchronize(0));
  flushRecords();
  EXPECT(flushed.size() == 2 && flushed_names[0] == "fooGraphLaunch" && flushed_names[1] == "fooGraph");
  EXPECT_OK(fooGraphDestroy(graph));
}

}  // namespace
}  // namespace runtime_tests
