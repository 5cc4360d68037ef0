// Runtime tests: events, markers in a stream's queue.
#include "harness.h"

namespace runtime_tests {
namespace {

RUNTIME_TEST(an_event_completes_when_its_stream_reaches_it) {
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  EXPECT_OK(fooEventQuery(event));  // never recorded: nothing to wait for
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
  EXPECT_OK(fooEventRecord(event, 0, 0));
  EXPECT(fooEventQuery(event) == fooErrorNotReady);
  gate.open.set_value();
  EXPECT_OK(fooEventSynchronize(event));
  EXPECT_OK(fooEventQuery(event));
  EXPECT_OK(fooEventDestroy(event));
}

RUNTIME_TEST(an_event_and_its_stream_agree_on_what_is_done) {
  std::vector<int> order;
  std::pair<std::vector<int>*, int> slot{&order, 0};
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  for (int i = 0; i < 2000; ++i) {  // the host races the worker on every round
    EXPECT_OK(fooLaunchKernel(0, 0, &append, &slot));
    EXPECT_OK(fooEventRecord(event, 0, 0));
    EXPECT_OK(fooEventSynchronize(event));
    EXPECT(fooStreamQuery(0, 0) == fooSuccess);
    EXPECT_OK(fooLaunchKernel(0, 0, &append, &slot));
    EXPECT_OK(fooEventRecord(event, 0, 0));
    EXPECT_OK(fooStreamSynchronize(0, 0));  // and a synchronized stream has completed its events
    EXPECT(fooEventQuery(event) == fooSuccess);
  }
  EXPECT(order.size() == 4000);
  EXPECT_OK(fooEventDestroy(event));
}

RUNTIME_TEST(a_stream_waiting_on_an_event_runs_nothing_before_it) {
  fooStream_t producer = 0, consumer = 0;
  EXPECT_OK(fooStreamCreate(0, &producer, 0));
  EXPECT_OK(fooStreamCreate(0, &consumer, 0));
  fooEvent_t ready = nullptr;
  EXPECT_OK(fooEventCreate(&ready, 0));
  Gate gate;
  std::vector<int> order;
  std::pair<std::vector<int>*, int> produced{&order, 1}, consumed{&order, 2};
  EXPECT_OK(fooLaunchKernel(0, producer, &Gate::wait, &gate));
  EXPECT_OK(fooLaunchKernel(0, producer, &append, &produced));
  EXPECT_OK(fooEventRecord(ready, 0, producer));
  EXPECT_OK(fooStreamWaitEvent(0, consumer, ready));
  EXPECT_OK(fooLaunchKernel(0, consumer, &append, &consumed));
  EXPECT(fooStreamQuery(0, consumer) == fooErrorNotReady);
  gate.open.set_value();
  EXPECT_OK(fooStreamSynchronize(0, consumer));
  EXPECT(order == (std::vector<int>{1, 2}));
  EXPECT_OK(fooEventDestroy(ready));
}

RUNTIME_TEST(elapsed_time_needs_timing_events) {
  fooEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  EXPECT_OK(fooEventCreate(&start, 1));
  EXPECT_OK(fooEventCreate(&end, 1));
  EXPECT_OK(fooEventCreate(&untimed, 0));
  EXPECT_OK(fooEventRecord(start, 0, 0));
  EXPECT_OK(fooEventRecord(end, 0, 0));
  EXPECT_OK(fooEventRecord(untimed, 0, 0));
  EXPECT_OK(fooEventSynchronize(end));
  float ms = -1;
  EXPECT_OK(fooEventElapsedTime(&ms, start, end));
  EXPECT(ms >= 0);
  EXPECT(fooEventElapsedTime(&ms, start, untimed) == fooErrorInvalidValue);
  for (fooEvent_t event : {start, end, untimed}) EXPECT_OK(fooEventDestroy(event));
}

}  // namespace
}  // namespace runtime_tests
