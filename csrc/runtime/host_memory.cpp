// Page-locked host memory, as cudaHostAlloc: anonymous mappings the runtime keeps a registry of, so
// it can tell whether an address lies in pinned memory (what makes a copy from it asynchronous).
#include "foo_runtime.h"

#include <sys/mman.h>

#include <iterator>
#include <map>
#include <mutex>

namespace foo_runtime {
namespace {

std::mutex g_pinned_mutex;
std::map<const char*, size_t> g_pinned;  // start -> size

}  // namespace
}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

fooError_t fooHostAlloc(void** ptr, size_t size) {
  if (ptr == nullptr || size == 0) return fooErrorInvalidValue;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fooErrorMemoryAllocation;
  // Locking is best effort: RLIMIT_MEMLOCK is small in most containers, and nothing here depends on
  // the pages staying resident (the simulated device reads host memory directly).
  mlock(p, size);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  g_pinned.emplace(static_cast<const char*>(p), size);
  *ptr = p;
  return fooSuccess;
}

fooError_t fooFreeHost(void* ptr) {
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.find(static_cast<const char*>(ptr));
    if (it == g_pinned.end()) return fooErrorInvalidValue;
    size = it->second;
    g_pinned.erase(it);
  }
  munmap(ptr, size);
  return fooSuccess;
}

int fooHostPointerIsPinned(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return 0;
  it = std::prev(it);
  return p < it->first + it->second ? 1 : 0;
}

}  // extern "C"
