// The harness of the runtime's own tests: tests of the simulated driver at its C-like API
// (csrc/runtime/foo_runtime.h), with no PyTorch, as a vendor runtime is tested: a fault in memory mapping,
// stream order, events or error reporting is found here rather than through an operator. One file per
// area of the API (tests/runtime/test_*.cpp) registers its tests with RUNTIME_TEST; they are compiled
// with main.cpp and the runtime's sources into one program. Each test runs in its own process (the
// runtime reads its environment once): `runtime_tests NAME` runs one and exits 0 when it holds;
// `runtime_tests --list` names them. tests/test_runtime.py builds and drives it.
//
// Here: the registry, the checks (EXPECT, EXPECT_OK), and the helpers more than one test file uses.
#pragma once

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

namespace runtime_tests {

inline std::map<std::string, std::function<void()>>& tests() {
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

inline void append(void* arg) {
  auto* slot = static_cast<std::pair<std::vector<int>*, int>*>(arg);
  slot->first->push_back(slot->second);
}

// Runs `child` in a forked process; returns its wait status.
inline int inChild(const std::function<void()>& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    child();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

inline void nothing(void*) {}

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

// What activity tracing handed out at the last flushRecords(): the records, and their names.
inline std::vector<fooActivityRecord> flushed;
inline std::vector<std::string> flushed_names;

inline void flushRecords() {
  flushed.clear();
  flushed_names.clear();
  EXPECT_OK(fooActivityFlush([](const fooActivityRecord* record, void*) {
    flushed.push_back(*record);
    flushed_names.push_back(record->name);  // the record's name lives only during the callback
    flushed.back().name = nullptr;
  }, nullptr));
}

}  // namespace runtime_tests
