// Runtime tests: sharing device memory and events with other processes (fooIpc*). Each test forks its peers
// before any runtime call, so every process initialises a runtime of its own, and the processes pass handles
// and steps through pipes.
#include "harness.h"

#include <sys/mman.h>

namespace runtime_tests {
namespace {

// A pipe each way between the test's process and one peer.
struct Channel {
  int to_peer[2];
  int from_peer[2];
  Channel() { EXPECT(pipe(to_peer) == 0 && pipe(from_peer) == 0); }
};

template <class T>
void send(int fd, const T& value) {
  EXPECT(write(fd, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value)));
}

template <class T>
T receive(int fd) {
  T value;
  EXPECT(read(fd, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value)));
  return value;
}

// Forks a peer running `body(channel)`, which exits 0 unless an EXPECT fails.
pid_t startPeer(Channel& channel, const std::function<void(Channel&)>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body(channel);
    _exit(0);
  }
  return pid;
}

void expectExitedCleanly(pid_t pid) {
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Memory the kernels of `device` write and read: fooLaunchKernel runs them on the default stream.
struct Fill {
  int* data;
  int count;
  int value;
  static void run(void* arg) {
    auto* fill = static_cast<Fill*>(arg);
    for (int i = 0; i < fill->count; ++i) fill->data[i] = fill->value + i;
  }
};

void fill(int device, void* dev_ptr, int count, int value) {
  Fill f{static_cast<int*>(fooKernelAddress(dev_ptr)), count, value};
  EXPECT_OK(fooLaunchKernel(device, 0, &Fill::run, &f));
  EXPECT_OK(fooStreamSynchronize(device, 0));
}

bool holds(void* dev_ptr, int count, int value) {
  const int* data = static_cast<const int*>(fooKernelAddress(dev_ptr));
  for (int i = 0; i < count; ++i) {
    if (data[i] != value + i) return false;
  }
  return true;
}

constexpr int kInts = 3000;  // three pages

RUNTIME_TEST(shared_memory_is_the_same_memory_in_both_processes) {
  Channel channel;
  const pid_t peer = startPeer(channel, [](Channel& c) {
    void* memory = nullptr;
    EXPECT_OK(fooMalloc(1, &memory, kInts * sizeof(int)));
    fill(1, memory, kInts, 100);
    fooIpcMemHandle_t handle;
    // A handle of an address inside the allocation is one of the whole allocation.
    EXPECT_OK(fooIpcGetMemHandle(&handle, static_cast<char*>(memory) + 4096));
    send(c.from_peer[1], handle);
    receive<char>(c.to_peer[0]);  // the test's process wrote its part
    EXPECT(holds(static_cast<int*>(memory) + kInts / 2, kInts / 2, 7));
    send(c.from_peer[1], 'x');
    receive<char>(c.to_peer[0]);
  });
  const auto handle = receive<fooIpcMemHandle_t>(channel.from_peer[0]);
  size_t free_before = 0, total = 0;
  EXPECT_OK(fooMemGetInfo(1, &free_before, &total));
  void* opened = nullptr;
  EXPECT_OK(fooIpcOpenMemHandle(&opened, handle));
  EXPECT(fooPointerGetDevice(opened) == 1);  // device memory of the same device, at an address of this process
  void* base = nullptr;
  size_t bytes = 0;
  EXPECT_OK(fooMemGetAddressRange(&base, &bytes, static_cast<char*>(opened) + 100));
  EXPECT(base == opened && bytes == 3 * 4096);
  size_t free_after = 0;
  EXPECT_OK(fooMemGetInfo(1, &free_after, &total));
  EXPECT(free_after == free_before);  // not this process's allocation
  EXPECT(holds(opened, kInts, 100));
  fill(1, static_cast<int*>(opened) + kInts / 2, kInts / 2, 7);
  void* again = nullptr;
  EXPECT_OK(fooIpcOpenMemHandle(&again, handle));
  EXPECT(again == opened);
  send(channel.to_peer[1], 'x');
  receive<char>(channel.from_peer[0]);
  EXPECT_OK(fooIpcCloseMemHandle(again));
  EXPECT(holds(opened, kInts / 2, 100));  // one close of two: still mapped
  EXPECT_OK(fooIpcCloseMemHandle(opened));
  EXPECT(static_cast<const int*>(fooKernelAddress(opened))[0] == 0);  // unmapped: zeros, as the rest of the window
  EXPECT(fooIpcCloseMemHandle(opened) == fooErrorInvalidValue);
  EXPECT(fooFree(1, opened) == fooErrorInvalidValue);  // not this process's to free
  send(channel.to_peer[1], 'x');
  expectExitedCleanly(peer);
}

RUNTIME_TEST(open_memory_outlives_its_exporter_and_its_handles_do_not) {
  Channel channel;
  const pid_t peer = startPeer(channel, [](Channel& c) {
    void* memory[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
      EXPECT_OK(fooMalloc(0, &memory[i], kInts * sizeof(int)));
      fill(0, memory[i], kInts, 10 * i);
      fooIpcMemHandle_t handle;
      EXPECT_OK(fooIpcGetMemHandle(&handle, memory[i]));
      send(c.from_peer[1], handle);
    }
    receive<char>(c.to_peer[0]);
  });
  const auto first = receive<fooIpcMemHandle_t>(channel.from_peer[0]);
  const auto second = receive<fooIpcMemHandle_t>(channel.from_peer[0]);
  void* opened = nullptr;
  EXPECT_OK(fooIpcOpenMemHandle(&opened, first));
  send(channel.to_peer[1], 'x');
  expectExitedCleanly(peer);
  EXPECT(holds(opened, kInts, 0));  // the mapping keeps the exporter's pages
  void* late = nullptr;
  EXPECT(fooIpcOpenMemHandle(&late, second) == fooErrorInvalidIpcHandle);
  EXPECT_OK(fooIpcCloseMemHandle(opened));
  fooIpcMemHandle_t garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT(fooIpcOpenMemHandle(&late, garbage) == fooErrorInvalidValue);
}

RUNTIME_TEST(open_memory_can_be_shared_on_and_comes_home_to_its_address) {
  Channel first, second;
  const pid_t exporter = startPeer(first, [](Channel& c) {
    void* memory = nullptr;
    EXPECT_OK(fooMalloc(0, &memory, kInts * sizeof(int)));
    fill(0, memory, kInts, 1);
    fooIpcMemHandle_t handle;
    EXPECT_OK(fooIpcGetMemHandle(&handle, memory));
    send(c.from_peer[1], handle);
    const auto back = receive<fooIpcMemHandle_t>(c.to_peer[0]);  // shared on by the test's process
    void* home = nullptr;
    EXPECT_OK(fooIpcOpenMemHandle(&home, back));
    EXPECT(home == memory);
    EXPECT_OK(fooIpcCloseMemHandle(home));  // its own memory: closing leaves it alone
    receive<char>(c.to_peer[0]);  // the third process wrote
    EXPECT(holds(memory, kInts, 5));
    send(c.from_peer[1], 'x');
  });
  const pid_t third = startPeer(second, [](Channel& c) {
    const auto handle = receive<fooIpcMemHandle_t>(c.to_peer[0]);
    void* opened = nullptr;
    EXPECT_OK(fooIpcOpenMemHandle(&opened, handle));
    EXPECT(holds(opened, kInts, 1));
    fill(0, opened, kInts, 5);
    EXPECT_OK(fooIpcCloseMemHandle(opened));
    send(c.from_peer[1], 'x');
  });
  const auto handle = receive<fooIpcMemHandle_t>(first.from_peer[0]);
  void* opened = nullptr;
  EXPECT_OK(fooIpcOpenMemHandle(&opened, handle));
  fooIpcMemHandle_t onward;
  EXPECT_OK(fooIpcGetMemHandle(&onward, opened));
  send(first.to_peer[1], onward);
  send(second.to_peer[1], onward);
  receive<char>(second.from_peer[0]);
  expectExitedCleanly(third);
  EXPECT(holds(opened, kInts, 5));
  send(first.to_peer[1], 'x');
  receive<char>(first.from_peer[0]);
  expectExitedCleanly(exporter);
  EXPECT_OK(fooIpcCloseMemHandle(opened));
}

RUNTIME_TEST(processes_sharing_memory_must_see_the_same_devices) {
  Channel channel;
  const pid_t peer = startPeer(channel, [](Channel& c) {
    setenv("FOO_DEVICE_COUNT", "3", 1);
    void* memory = nullptr;
    EXPECT_OK(fooMalloc(0, &memory, 4096));
    fooIpcMemHandle_t handle;
    EXPECT_OK(fooIpcGetMemHandle(&handle, memory));
    send(c.from_peer[1], handle);
    receive<char>(c.to_peer[0]);
  });
  const auto handle = receive<fooIpcMemHandle_t>(channel.from_peer[0]);
  void* opened = nullptr;
  EXPECT(fooIpcOpenMemHandle(&opened, handle) == fooErrorInvalidDevice);
  send(channel.to_peer[1], 'x');
  expectExitedCleanly(peer);
}

RUNTIME_TEST(an_interprocess_event_orders_work_across_processes) {
  fooEvent_t plain = nullptr;
  fooIpcEventHandle_t handle;
  EXPECT_OK(fooEventCreate(&plain, 0));
  EXPECT(fooIpcGetEventHandle(&handle, plain) == fooErrorInvalidValue);  // only interprocess events
  EXPECT_OK(fooEventDestroy(plain));
  Channel channel;
  const pid_t peer = startPeer(channel, [](Channel& c) {
    fooEvent_t event = nullptr;
    EXPECT_OK(fooEventCreateInterprocess(&event));
    fooIpcEventHandle_t h;
    EXPECT_OK(fooIpcGetEventHandle(&h, event));
    send(c.from_peer[1], h);
    Gate gate;
    EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
    EXPECT_OK(fooEventRecord(event, 0, 0));
    float ms = 0;
    EXPECT(fooEventElapsedTime(&ms, event, event) == fooErrorInvalidValue);  // it measures no time
    send(c.from_peer[1], 'r');
    receive<char>(c.to_peer[0]);  // the test's process queued its wait
    gate.open.set_value();
    EXPECT_OK(fooEventSynchronize(event));
    // The test's process records it in turn, behind its own gate.
    receive<char>(c.to_peer[0]);
    EXPECT(fooEventQuery(event) == fooErrorNotReady);
    send(c.from_peer[1], 'q');
    EXPECT_OK(fooEventSynchronize(event));
    EXPECT_OK(fooEventDestroy(event));
  });
  const auto shared = receive<fooIpcEventHandle_t>(channel.from_peer[0]);
  fooEvent_t opened = nullptr;
  EXPECT_OK(fooIpcOpenEventHandle(&opened, shared));
  receive<char>(channel.from_peer[0]);  // recorded behind the peer's closed gate
  EXPECT(fooEventQuery(opened) == fooErrorNotReady);
  std::vector<int> order;
  std::pair<std::vector<int>*, int> slot{&order, 1};
  EXPECT_OK(fooStreamWaitEvent(0, 0, opened));
  EXPECT_OK(fooLaunchKernel(0, 0, &append, &slot));
  EXPECT(fooStreamQuery(0, 0) == fooErrorNotReady);  // waiting on the other process's work
  send(channel.to_peer[1], 'w');
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT(order.size() == 1);
  EXPECT_OK(fooEventQuery(opened));
  Gate gate;
  EXPECT_OK(fooLaunchKernel(0, 0, &Gate::wait, &gate));
  EXPECT_OK(fooEventRecord(opened, 0, 0));
  send(channel.to_peer[1], 'r');
  receive<char>(channel.from_peer[0]);  // the peer saw the record pending
  gate.open.set_value();
  EXPECT_OK(fooEventSynchronize(opened));
  EXPECT_OK(fooEventDestroy(opened));
  expectExitedCleanly(peer);
}

}  // namespace
}  // namespace runtime_tests
