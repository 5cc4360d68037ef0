// Runtime tests: streams (asynchronous, in launch order; launch counts; pools and priorities),
// FOO_LAUNCH_BLOCKING, synchronous runs, and how what finished work held is given back.
#include "harness.h"

namespace runtime_tests {
namespace {

RUNTIME_TEST(a_launch_returns_before_its_kernel_runs) {
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
  EXPECT(fooStreamQuery(0, 0) == fooErrorNotReady);
  fooStream_t other = 0;
  EXPECT_OK(fooStreamCreate(0, &other, 0));
  EXPECT_OK(fooStreamQuery(0, other));  // other streams are not held up
  gate.open.set_value();
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT_OK(fooStreamQuery(0, 0));
}

RUNTIME_TEST(a_stream_runs_its_work_in_launch_order) {
  std::vector<int> order;
  std::vector<std::pair<std::vector<int>*, int>> slots;
  for (int i = 0; i < 1000; ++i) slots.push_back({&order, i});
  Gate gate;
  EXPECT_OK(fooLaunchKernel(1, 0, &Gate::wait, &gate));
  for (auto& slot : slots) EXPECT_OK(fooLaunchKernel(1, 0, &append, &slot));
  EXPECT(order.empty());
  gate.open.set_value();
  EXPECT_OK(fooDeviceSynchronize(1));
  EXPECT(order.size() == 1000);
  for (int i = 0; i < 1000; ++i) EXPECT(order[i] == i);
}

RUNTIME_TEST(a_stream_counts_its_launches) {
  fooStream_t stream = 0, other = 0;
  EXPECT_OK(fooStreamCreate(0, &stream, 0));
  EXPECT_OK(fooStreamCreate(0, &other, 0));
  uint64_t start = 0, count = 0;
  EXPECT_OK(fooStreamGetLaunchCount(0, stream, &start));
  std::vector<int> order;
  std::pair<std::vector<int>*, int> slot{&order, 1};
  EXPECT_OK(fooLaunchKernel(0, stream, &append, &slot));
  EXPECT_OK(fooStreamGetLaunchCount(0, stream, &count));
  EXPECT(count == start + 1);
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, other, &Gate::wait, &gate));
  EXPECT_OK(fooEventRecord(event, 0, other));
  EXPECT_OK(fooStreamWaitEvent(0, stream, event));  // pending: queued on the stream
  EXPECT_OK(fooStreamGetLaunchCount(0, stream, &count));
  EXPECT(count == start + 2);
  gate.open.set_value();
  EXPECT_OK(fooStreamSynchronize(0, stream));
  EXPECT_OK(fooStreamWaitEvent(0, stream, event));  // complete: nothing to queue
  EXPECT_OK(fooEventRecord(event, 0, stream));
  EXPECT_OK(fooStreamGetLaunchCount(0, stream, &count));
  EXPECT(count == start + 3);
  EXPECT(fooStreamGetLaunchCount(0, 1000, &count) == fooErrorInvalidValue);
  EXPECT_OK(fooStreamSynchronize(0, stream));
  EXPECT_OK(fooEventDestroy(event));
}

RUNTIME_TEST(stream_pools_and_priorities) {
  fooStream_t low = 0, high = 0;
  int priority = 1;
  EXPECT_OK(fooStreamCreate(0, &low, 0));
  EXPECT_OK(fooStreamCreate(0, &high, -1));
  EXPECT(low != 0 && high != 0 && low != high);
  EXPECT_OK(fooStreamGetPriority(0, low, &priority));
  EXPECT(priority == 0);
  EXPECT_OK(fooStreamGetPriority(0, high, &priority));
  EXPECT(priority == -1);
  EXPECT_OK(fooStreamGetPriority(0, 0, &priority));
  EXPECT(priority == 0);
  EXPECT(fooStreamQuery(0, 100000) == fooErrorInvalidValue);
  EXPECT(fooLaunchKernel(0, -1, &Gate::wait, nullptr) == fooErrorInvalidValue);
}

RUNTIME_TEST(launch_blocking_runs_kernels_inline) {  // run with FOO_LAUNCH_BLOCKING=1
  EXPECT(fooLaunchBlocking() == 1);
  std::vector<int> order;
  std::pair<std::vector<int>*, int> slot{&order, 7};
  EXPECT_OK(fooLaunchKernel(0, 0, &append, &slot));
  EXPECT(order == std::vector<int>{7});  // already ran, on this thread
}

RUNTIME_TEST(a_synchronous_run_waits_for_the_stream_and_runs_on_the_caller) {
  EXPECT_OK(fooActivityEnable(1));
  std::vector<int> order;
  std::pair<std::vector<int>*, int> first{&order, 1};
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
  EXPECT_OK(fooLaunchKernel(0, 0, &append, &first));
  std::thread opener([&] { gate.open.set_value(); });
  struct Run {
    std::vector<int>* order;
    pid_t thread;
  } run{&order, 0};
  EXPECT_OK(fooStreamRunSynchronous(0, 0, [](void* arg) {
    auto* r = static_cast<Run*>(arg);
    r->order->push_back(2);
    r->thread = gettid();
  }, &run, fooActivityKindMemcpy, "copy to the host"));
  opener.join();
  EXPECT((order == std::vector<int>{1, 2}));  // after the stream's work
  EXPECT(run.thread == gettid());
  flushRecords();
  EXPECT(flushed.size() == 6);
  EXPECT(flushed_names[4] == "fooStreamRunSynchronous" && flushed_names[5] == "copy to the host");
  EXPECT(flushed[5].kind == fooActivityKindMemcpy && flushed[3].end_ns <= flushed[5].start_ns);
}

RUNTIME_TEST(launches_on_a_stream_give_back_what_its_finished_work_held) {
  fooStream_t stream = 0;
  EXPECT_OK(fooStreamCreate(0, &stream, 0));
  Gate before, after;
  Released argument;
  fooEvent_t ran = nullptr;
  EXPECT_OK(fooEventCreate(&ran, 0));
  // The stream never idles in between (gates before and after), so its worker gives nothing back itself.
  EXPECT_OK(fooLaunchKernel(0, stream, &Gate::wait, &before));
  EXPECT_OK(fooLaunchKernelEx(0, stream, &Released::run, &argument, &Released::release, fooActivityKindKernel, nullptr));
  EXPECT_OK(fooEventRecord(ran, 0, stream));
  EXPECT_OK(fooLaunchKernel(0, stream, &Gate::wait, &after));
  before.open.set_value();
  EXPECT_OK(fooEventSynchronize(ran));
  EXPECT(argument.count == 0);  // done, not yet given back: an event says nothing about it
  // Launches give back in batches, every 16 launches: within the next 16, this thread gives it back.
  for (int launch = 0; launch < 16 && argument.count == 0; ++launch) {
    EXPECT_OK(fooLaunchKernel(0, stream, &nothing, nullptr));
  }
  EXPECT(argument.count == 1 && argument.by.load() == std::this_thread::get_id());
  after.open.set_value();
  EXPECT_OK(fooStreamSynchronize(0, stream));
  EXPECT(argument.count == 1);  // once
  EXPECT_OK(fooEventDestroy(ran));
}

RUNTIME_TEST(a_synchronization_returns_once_the_work_it_waited_for_is_given_back) {
  for (int round = 0; round < 200; ++round) {  // the worker and the host race to give it back
    Released argument;
    EXPECT_OK(fooLaunchKernelEx(0, 0, &Released::run, &argument, &Released::release, fooActivityKindKernel, nullptr));
    EXPECT_OK(round % 2 == 0 ? fooStreamSynchronize(0, 0) : fooDeviceSynchronize(0));
    EXPECT(argument.count == 1);
  }
}

RUNTIME_TEST(an_idle_stream_gives_back_what_its_finished_work_held) {
  Released argument;
  EXPECT_OK(fooLaunchKernelEx(0, 0, &Released::run, &argument, &Released::release, fooActivityKindKernel, nullptr));
  // No host call on the stream: its worker gives the argument back once it idles (waited for, up to 2 minutes).
  for (int waited_ms = 0; argument.count == 0 && waited_ms < 120000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT(argument.count == 1 && argument.by.load() != std::this_thread::get_id());
}

}  // namespace
}  // namespace runtime_tests
