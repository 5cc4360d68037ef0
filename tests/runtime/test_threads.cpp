// Runtime tests: several host threads at once on shared and own streams (launching, giving back,
// synchronizing, a synchronous run holding its stream).
#include "harness.h"

namespace runtime_tests {
namespace {

// A launch's argument on the heap, as the integration's are: it checks, when it runs and when it is given
// back, that it is still alive, and poisons itself when freed (a second give-back, or a give-back of
// another launch's argument, is caught at once rather than as heap corruption later).
struct HeapArgument {
  static constexpr uint64_t kAlive = 0x600DF00DCAFEBEEF;
  uint64_t magic = kAlive;
  std::atomic<int>* ran;
  std::atomic<int>* released;
  static void run(void* arg) {
    auto* a = static_cast<HeapArgument*>(arg);
    EXPECT(a->magic == kAlive);
    a->ran->fetch_add(1);
  }
  static void release(void* arg) {
    auto* a = static_cast<HeapArgument*>(arg);
    EXPECT(a->magic == kAlive);
    a->magic = 0;
    a->released->fetch_add(1);
    delete a;
  }
};

// Host threads that launch, query, synchronise, record and wait on events on shared streams and on their
// own, interleaved: every launch runs once and is given back once, whichever thread gives it back (they
// race the stream's worker and each other to do it). Each thread also launches bursts, so work stays
// queued while others give back what completed.
void stressStreams(int threads, int launches_per_thread, bool own_streams) {
  std::atomic<int> ran{0}, released{0};
  fooStream_t shared = 0;
  EXPECT_OK(fooStreamCreate(0, &shared, 0));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      fooStream_t own = shared;
      if (own_streams) EXPECT_OK(fooStreamCreate(0, &own, -1));
      fooEvent_t event = nullptr;
      EXPECT_OK(fooEventCreate(&event, 0));
      for (int i = 0; i < launches_per_thread; ++i) {
        const fooStream_t stream = (i % 3 == 0) ? 0 : (i % 3 == 1 ? shared : own);
        EXPECT_OK(fooLaunchKernelEx(0, stream, &HeapArgument::run, new HeapArgument{HeapArgument::kAlive, &ran, &released},
                                    &HeapArgument::release, fooActivityKindKernel, nullptr));
        switch ((i + t) % 23) {
          case 0: EXPECT_OK(fooStreamSynchronize(0, stream)); break;
          case 5: EXPECT(fooStreamQuery(0, stream) != fooErrorInvalidValue); break;
          case 9: EXPECT_OK(fooEventRecord(event, 0, stream)); break;
          case 13: EXPECT(fooEventQuery(event) != fooErrorInvalidValue); break;
          case 17: EXPECT_OK(fooStreamWaitEvent(0, shared, event)); break;
          case 19: EXPECT_OK(fooEventSynchronize(event)); break;
          case 22: if (t == 0) EXPECT_OK(fooDeviceSynchronize(0)); break;
          default: break;
        }
      }
      EXPECT_OK(fooStreamSynchronize(0, own));
      EXPECT_OK(fooEventDestroy(event));
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT(ran.load() == threads * launches_per_thread);
  EXPECT(released.load() == threads * launches_per_thread);  // each once: a synchronization returns after the give-back
}

RUNTIME_TEST(host_threads_sharing_streams_give_back_each_launch_once) { stressStreams(4, 20000, false); }

RUNTIME_TEST(host_threads_on_their_own_and_shared_streams_give_back_each_launch_once) {
  stressStreams(4, 20000, true);
}

// A synchronization returns once the work it waited for is given back even when another host thread is
// the one giving it back at that moment (the worker's give-back was already waited for).
RUNTIME_TEST(a_synchronization_waits_for_another_threads_give_back) {
  std::atomic<bool> stop{false};
  std::thread launcher([&] {  // gives back completed work every 16 launches, on the default stream
    while (!stop.load()) EXPECT_OK(fooLaunchKernel(0, 0, &nothing, nullptr));
  });
  for (int round = 0; round < 2000; ++round) {
    Released argument;
    EXPECT_OK(fooLaunchKernelEx(0, 0, &Released::run, &argument, &Released::release, fooActivityKindKernel, nullptr));
    EXPECT_OK(fooStreamSynchronize(0, 0));
    EXPECT(argument.count == 1);
  }
  stop = true;
  launcher.join();
}

// A synchronous run holds its stream: another thread's launch made meanwhile returns only after the run
// (else that thread could free memory its queued work still uses, which this run would be handed by a
// stream-ordered allocator). Event records pass: the caching allocator records them under a lock the
// run may need.
struct HeldRun {
  Gate inside, finish;
  std::atomic<bool> returned{false};
  static void run(void* arg) {
    auto* r = static_cast<HeldRun*>(arg);
    r->inside.open.set_value();
    Gate::wait(&r->finish);
    r->returned = true;
  }
};

RUNTIME_TEST(a_synchronous_run_holds_its_stream_against_other_threads_launches) {
  HeldRun run;
  std::thread host([&] { EXPECT_OK(fooStreamRunSynchronous(0, 0, &HeldRun::run, &run, fooActivityKindKernel, "held")); });
  run.inside.opened.wait();
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  EXPECT_OK(fooEventRecord(event, 0, 0));  // returns while the run holds the stream
  std::atomic<bool> launch_returned{false}, run_had_returned{false};
  std::thread other([&] {
    EXPECT_OK(fooLaunchKernel(0, 0, &nothing, nullptr));
    run_had_returned = run.returned.load();
    launch_returned = true;
  });
  // Without the hold the launch returns at once: it is given up to a second to.
  for (int waited_ms = 0; !launch_returned && waited_ms < 1000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT(!launch_returned);
  run.finish.open.set_value();
  host.join();
  other.join();
  EXPECT(run_had_returned);
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT_OK(fooEventDestroy(event));
}

}  // namespace
}  // namespace runtime_tests
