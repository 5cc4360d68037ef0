// Devices: count, lazy initialisation, the per-thread current device, properties, error strings.
#include "foo_runtime.h"
#include "internal.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace foo_runtime {
namespace {

int readDeviceCount() {
  const char* env = std::getenv("FOO_DEVICE_COUNT");
  if (env == nullptr || *env == '\0') return 2;
  int n = std::atoi(env);
  if (n < 0) n = 0;
  return n > FOO_MAX_DEVICES ? FOO_MAX_DEVICES : n;
}

size_t readDeviceMemoryBytes() {
  const char* env = std::getenv("FOO_DEVICE_MEMORY_MB");
  if (env != nullptr && *env != '\0') return static_cast<size_t>(std::atoll(env)) << 20;
  const size_t host = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  return host / 4;
}

DeviceMemory g_memory[FOO_MAX_DEVICES];
std::once_flag g_init_once;
std::atomic<bool> g_init_done{false};  // read first: call_once costs thread-local bookkeeping at every call
// Atomic: read by any thread while the initialising one (or a fork's child handler) writes them.
std::atomic<bool> g_init_ok{false};
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_in_bad_fork{false};
thread_local int t_current_device = 0;

}  // namespace

int deviceCount() {
  static const int count = readDeviceCount();
  return count;
}

bool validDevice(int device) { return device >= 0 && device < deviceCount(); }

DeviceMemory& deviceMemory(int device) { return g_memory[device]; }

fooError_t ensureInitialized() {
  if (g_in_bad_fork) return fooErrorForkedProcess;
  if (g_init_done.load(std::memory_order_acquire)) return g_init_ok ? fooSuccess : fooErrorInitialization;
  std::call_once(g_init_once, [] {
    const size_t bytes = readDeviceMemoryBytes();
    bool ok = true;
    for (int d = 0; d < deviceCount(); ++d) ok = ok && mapDeviceMemory(d, bytes);
    g_init_ok = ok;
    g_initialized = true;
    pthread_atfork(nullptr, nullptr, [] { g_in_bad_fork = true; });
    g_init_done.store(true, std::memory_order_release);
  });
  return g_init_ok ? fooSuccess : fooErrorInitialization;
}

}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

const char* fooGetErrorString(fooError_t error) {
  switch (error) {
    case fooSuccess: return "no error";
    case fooErrorInvalidDevice: return "invalid device ordinal";
    case fooErrorMemoryAllocation: return "out of memory";
    case fooErrorInvalidValue: return "invalid argument";
    case fooErrorNotReady: return "device not ready";
    case fooErrorInitialization: return "initialization error";
    case fooErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case fooErrorHazard: return "the sanitizer found a hazard";
    case fooErrorInvalidIpcHandle:
      return "invalid interprocess handle: the process that shared it has exited, or it is not a handle";
    case fooErrorForkedProcess:
      return "Cannot re-initialize foo in forked subprocess. To use foo with multiprocessing, you must use the "
             "'spawn' start method";
  }
  return "unknown error";
}

fooError_t fooGetDeviceCount(int* count) {
  *count = deviceCount();
  return fooSuccess;
}

fooError_t fooInit(void) { return ensureInitialized(); }

int fooIsInitialized(void) { return g_initialized && !g_in_bad_fork ? 1 : 0; }

int fooIsInBadFork(void) { return g_in_bad_fork ? 1 : 0; }

fooError_t fooGetDevice(int* device) {
  *device = t_current_device;
  return fooSuccess;
}

fooError_t fooSetDevice(int device) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  t_current_device = device;
  return fooSuccess;
}

fooError_t fooGetDeviceProperties(fooDeviceProp* prop, int device) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "Foo Simulated Accelerator");
  prop->totalGlobalMem = deviceMemory(device).size;
  prop->major = 1;
  prop->minor = 0;
  prop->multiProcessorCount = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return fooSuccess;
}

}  // extern "C"
