// Tests of the simulated driver at its C-like API (csrc/runtime/foo_runtime.h), with no PyTorch, as a
// vendor runtime is tested: a fault in memory mapping, stream order, events or error reporting is
// found here rather than through an operator. Each test runs in its own process (the runtime reads its
// environment once): `runtime_tests NAME` runs one and exits 0 when it holds; `runtime_tests --list`
// names them. tests/test_runtime.py builds and drives it.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/foo_runtime.h"

namespace {

std::map<std::string, std::function<void()>>& tests() {
  static std::map<std::string, std::function<void()>> registry;
  return registry;
}

struct Register {
  Register(const char* name, std::function<void()> test) { tests()[name] = std::move(test); }
};

#define RUNTIME_TEST(name)             \
  void name();                         \
  const Register register_##name(#name, name); \
  void name()

#define EXPECT(condition)                                                            \
  do {                                                                               \
    if (!(condition)) {                                                              \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

#define EXPECT_OK(call) EXPECT((call) == fooSuccess)

// A kernel that blocks its stream until the test opens the gate: "still queued" without timing.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  static void wait(void* gate) { static_cast<Gate*>(gate)->opened.wait(); }
};

void append(void* arg) {
  auto* slot = static_cast<std::pair<std::vector<int>*, int>*>(arg);
  slot->first->push_back(slot->second);
}

// Runs `child` in a forked process; returns its wait status.
int inChild(const std::function<void()>& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    child();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// ---- Devices -------------------------------------------------------------------------------------

RUNTIME_TEST(device_count_comes_from_the_environment_without_initialising) {
  int count = 0;
  EXPECT_OK(fooGetDeviceCount(&count));
  EXPECT(count == std::atoi(std::getenv("FOO_DEVICE_COUNT")));
  EXPECT(!fooIsInitialized());
  EXPECT_OK(fooInit());
  EXPECT(fooIsInitialized());
}

RUNTIME_TEST(invalid_devices_are_refused) {
  int count = 0;
  fooGetDeviceCount(&count);
  void* ptr = nullptr;
  fooDeviceProp prop;
  EXPECT(fooSetDevice(count) == fooErrorInvalidDevice);
  EXPECT(fooSetDevice(-1) == fooErrorInvalidDevice);
  EXPECT(fooMalloc(count, &ptr, 16) == fooErrorInvalidDevice);
  EXPECT(fooGetDeviceProperties(&prop, count) == fooErrorInvalidDevice);
  EXPECT_OK(fooSetDevice(count - 1));
  int current = -1;
  EXPECT_OK(fooGetDevice(&current));
  EXPECT(current == count - 1);
}

RUNTIME_TEST(current_device_is_per_thread) {
  EXPECT_OK(fooSetDevice(1));
  int other_thread_device = -1;
  std::async(std::launch::async, [&] { fooGetDevice(&other_thread_device); }).wait();
  EXPECT(other_thread_device == 0);
}

RUNTIME_TEST(properties_report_the_memory_size) {
  fooDeviceProp prop;
  EXPECT_OK(fooGetDeviceProperties(&prop, 0));
  EXPECT(prop.totalGlobalMem == (size_t{64} << 20));
  EXPECT(std::strlen(prop.name) > 0);
  for (int e = fooSuccess; e <= fooErrorForkedProcess; ++e)
    EXPECT(std::strcmp(fooGetErrorString(static_cast<fooError_t>(e)), "unknown error") != 0);
}

// ---- Memory: one allocation, two mappings --------------------------------------------------------

RUNTIME_TEST(memory_is_mapped_twice) {
  void* device = nullptr;
  EXPECT_OK(fooMalloc(1, &device, 1000));
  EXPECT(fooPointerGetDevice(device) == 1);
  auto* kernel = static_cast<unsigned char*>(fooKernelAddress(device));
  EXPECT(kernel != nullptr && kernel != device);
  EXPECT(fooDeviceAddress(kernel) == device);
  EXPECT(fooDeviceAddress(kernel + 10) == static_cast<char*>(device) + 10);
  std::memset(kernel, 0xab, 1000);  // the kernel mapping is host read/write
  EXPECT(kernel[999] == 0xab);
  int host = 0;
  EXPECT(fooPointerGetDevice(&host) == -1 && fooKernelAddress(&host) == nullptr && fooDeviceAddress(&host) == nullptr);
  EXPECT_OK(fooFree(1, device));
}

RUNTIME_TEST(host_code_cannot_dereference_a_device_address) {
  void* device = nullptr;
  EXPECT_OK(fooMalloc(0, &device, 64));
  const int status = inChild([&] {
    volatile char value = *static_cast<volatile char*>(device);
    (void)value;
  });
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
}

RUNTIME_TEST(kernels_may_read_just_outside_device_memory_but_not_write) {
  // A kernel may load an element before or after a buffer and discard it (a masked load): at the edges of a
  // device's memory that reads zeros; writing there faults.
  size_t free_bytes = 0, total = 0;
  EXPECT_OK(fooMemGetInfo(0, &free_bytes, &total));
  void* whole = nullptr;
  EXPECT_OK(fooMalloc(0, &whole, total));  // the first byte of device 0's memory to its last
  const auto* first = static_cast<const volatile unsigned char*>(fooKernelAddress(whole));
  const int reads = inChild([&] { _exit(first[-1] == 0 && first[total] == 0 && first[total + 4095] == 0 ? 0 : 1); });
  EXPECT(WIFEXITED(reads) && WEXITSTATUS(reads) == 0);
  const int writes = inChild([&] { *const_cast<volatile unsigned char*>(first - 1) = 1; });
  EXPECT(WIFSIGNALED(writes) && WTERMSIG(writes) == SIGSEGV);
  EXPECT_OK(fooFree(0, whole));
}

RUNTIME_TEST(memory_is_accounted_and_exhaustion_is_an_error) {
  size_t free_before = 0, total = 0;
  EXPECT_OK(fooMemGetInfo(0, &free_before, &total));
  EXPECT(total == (size_t{64} << 20) && free_before == total);
  void* block = nullptr;
  EXPECT_OK(fooMalloc(0, &block, 1 << 20));
  size_t free_after = 0;
  EXPECT_OK(fooMemGetInfo(0, &free_after, &total));
  EXPECT(free_after == free_before - (1 << 20));
  void* too_big = nullptr;
  EXPECT(fooMalloc(0, &too_big, total) == fooErrorMemoryAllocation);
  EXPECT_OK(fooFree(0, block));
  EXPECT_OK(fooMalloc(0, &too_big, total));  // usable after the failure, and whole once freed
  EXPECT_OK(fooFree(0, too_big));
  size_t other_free = 0;
  EXPECT_OK(fooMemGetInfo(1, &other_free, &total));
  EXPECT(other_free == total);  // each device has its own memory
}

RUNTIME_TEST(pinned_host_memory_is_recognised) {
  void* pinned = nullptr;
  EXPECT_OK(fooHostAlloc(&pinned, 4096));
  EXPECT(fooHostPointerIsPinned(pinned) == 1);
  EXPECT(fooHostPointerIsPinned(static_cast<char*>(pinned) + 4095) == 1);
  int pageable = 0;
  EXPECT(fooHostPointerIsPinned(&pageable) == 0);
  static_cast<char*>(pinned)[0] = 1;  // host memory: the host may touch it
  EXPECT_OK(fooFreeHost(pinned));
  EXPECT(fooHostPointerIsPinned(pinned) == 0);
}

// ---- Streams: asynchronous, in launch order --------------------------------------------------------

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

// ---- Events: markers in a stream's queue -----------------------------------------------------------

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

// ---- Launch blocking and fork --------------------------------------------------------------------

RUNTIME_TEST(launch_blocking_runs_kernels_inline) {  // run with FOO_LAUNCH_BLOCKING=1
  EXPECT(fooLaunchBlocking() == 1);
  std::vector<int> order;
  std::pair<std::vector<int>*, int> slot{&order, 7};
  EXPECT_OK(fooLaunchKernel(0, 0, &append, &slot));
  EXPECT(order == std::vector<int>{7});  // already ran, on this thread
}

RUNTIME_TEST(a_child_forked_after_initialisation_cannot_use_the_device) {
  EXPECT_OK(fooInit());
  const int status = inChild([] {
    void* ptr = nullptr;
    if (!fooIsInBadFork() || fooIsInitialized()) _exit(2);
    if (fooMalloc(0, &ptr, 16) != fooErrorForkedProcess) _exit(3);
    if (fooStreamSynchronize(0, 0) != fooErrorForkedProcess) _exit(4);
  });
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT(!fooIsInBadFork());  // the parent keeps its device
}

// ---- Activity tracing ------------------------------------------------------------------------------

std::vector<fooActivityRecord> flushed;
std::vector<std::string> flushed_names;

void flushRecords() {
  flushed.clear();
  flushed_names.clear();
  EXPECT_OK(fooActivityFlush([](const fooActivityRecord* record, void*) {
    flushed.push_back(*record);
    flushed_names.push_back(record->name);  // the record's name lives only during the callback
    flushed.back().name = nullptr;
  }, nullptr));
}

int64_t wallClockNs() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

void nothing(void*) {}

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

// ---- Graphs --------------------------------------------------------------------------------------

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

// A launch's argument that records who gave it back.
struct Released {
  std::atomic<int> count{0};
  std::atomic<std::thread::id> by{};
  static void run(void*) {}
  static void release(void* arg) {
    auto* r = static_cast<Released*>(arg);
    r->by = std::this_thread::get_id();
    ++r->count;
  }
};

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

// ---- Several host threads -----------------------------------------------------------------------

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

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& [name, test] : tests()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc != 2 || tests().count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: runtime_tests --list | TEST\n");
    return 2;
  }
  tests()[argv[1]]();
  return 0;
}
