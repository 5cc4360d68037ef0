// Runtime tests: activity tracing (what a profiler reads).
#include "harness.h"

namespace runtime_tests {
namespace {

int64_t wallClockNs() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

RUNTIME_TEST(activity_tracing_records_each_launch_and_its_work) {
  fooStream_t stream = 0;
  EXPECT_OK(fooStreamCreate(1, &stream, 0));
  EXPECT_OK(fooActivityEnable(1));
  EXPECT(fooActivityIsEnabled() == 1);
  Gate gate;
  EXPECT_OK(fooActivityPushExternalCorrelationId(41));
  EXPECT_OK(fooLaunchKernelEx(1, stream, &Gate::wait, &gate, nullptr, fooActivityKindKernel, "gate"));
  EXPECT_OK(fooActivityPushExternalCorrelationId(42));  // the innermost id is the one a launch carries
  EXPECT_OK(fooLaunchKernelEx(1, stream, &nothing, nullptr, nullptr, fooActivityKindMemcpy, "copy"));
  uint64_t popped = 0;
  EXPECT_OK(fooActivityPopExternalCorrelationId(&popped));
  EXPECT(popped == 42);
  EXPECT_OK(fooActivityPopExternalCorrelationId(nullptr));
  EXPECT(fooActivityPopExternalCorrelationId(nullptr) == fooErrorInvalidValue);
  EXPECT_OK(fooLaunchKernel(1, stream, &nothing, nullptr));
  flushRecords();
  EXPECT(flushed.empty());  // nothing has completed: the gate holds the stream
  const int64_t opened = wallClockNs();
  gate.open.set_value();
  EXPECT_OK(fooStreamSynchronize(1, stream));
  flushRecords();
  // Per launch, in the order the work completed: the launch call on this thread, then the work.
  EXPECT(flushed.size() == 6);
  const char* names[] = {"fooLaunchKernel", "gate", "fooLaunchKernel", "copy", "fooLaunchKernel", "kernel"};
  const fooActivityKind kinds[] = {fooActivityKindRuntime, fooActivityKindKernel, fooActivityKindRuntime,
                                   fooActivityKindMemcpy,  fooActivityKindRuntime, fooActivityKindKernel};
  const uint64_t external[] = {41, 41, 42, 42, 0, 0};
  for (int i = 0; i < 6; ++i) {
    EXPECT(flushed_names[i] == names[i]);
    EXPECT(flushed[i].kind == kinds[i]);
    EXPECT(flushed[i].external_id == external[i]);
    EXPECT(flushed[i].device == 1 && flushed[i].stream == stream);
    EXPECT(flushed[i].thread_id == static_cast<uint64_t>(gettid()));
    EXPECT(flushed[i].start_ns <= flushed[i].end_ns);
    EXPECT(flushed[i].correlation_id == flushed[i / 2 * 2].correlation_id);  // a launch's two records
  }
  EXPECT(flushed[0].correlation_id != flushed[2].correlation_id);
  // The copy was launched before the gate opened and ran after: device time, not host time.
  EXPECT(flushed[2].end_ns <= opened && flushed[3].start_ns >= opened);
  EXPECT(flushed[1].end_ns <= flushed[3].start_ns && flushed[3].end_ns <= flushed[5].start_ns);  // stream order
  flushRecords();
  EXPECT(flushed.empty());  // a flush hands each record out once
}

RUNTIME_TEST(activity_tracing_follows_what_was_launched_while_enabled) {
  EXPECT_OK(fooLaunchKernel(0, 0, &nothing, nullptr));
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT(fooActivityIsEnabled() == 0);
  flushRecords();
  EXPECT(flushed.empty());  // tracing was off
  EXPECT_OK(fooActivityEnable(1));
  Gate gate;
  EXPECT_OK(fooLaunchKernelEx(0, 0, &Gate::wait, &gate, nullptr, fooActivityKindKernel, "launched while enabled"));
  EXPECT_OK(fooActivityEnable(0));
  EXPECT_OK(fooLaunchKernelEx(0, 0, &nothing, nullptr, nullptr, fooActivityKindKernel, "launched after"));
  gate.open.set_value();
  EXPECT_OK(fooDeviceSynchronize(0));
  flushRecords();
  EXPECT(flushed.size() == 2 && flushed_names[1] == "launched while enabled");
  // Enabling again starts a new trace: work of the old one that completes later belongs to none.
  Gate second;
  EXPECT_OK(fooActivityEnable(1));
  EXPECT_OK(fooLaunchKernelEx(0, 0, &Gate::wait, &second, nullptr, fooActivityKindKernel, "old trace"));
  EXPECT_OK(fooActivityEnable(1));
  second.open.set_value();
  EXPECT_OK(fooDeviceSynchronize(0));
  flushRecords();
  EXPECT(flushed.empty());
  EXPECT(fooLaunchKernelEx(0, 0, &nothing, nullptr, nullptr, fooActivityKindRuntime, "x") == fooErrorInvalidValue);
}

}  // namespace
}  // namespace runtime_tests
