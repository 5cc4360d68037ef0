// Device memory: each device is one memfd mapped twice (no-access device view, read/write kernel
// view). fooMalloc carves page-aligned ranges out of it with a first-fit free list; fooFree punches
// the pages out so the host gets them back, as freeing device memory would.
#include "foo_runtime.h"
#include "internal.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

namespace foo_runtime {
namespace {

constexpr size_t kPage = 4096;

struct Arena {
  std::mutex mutex;
  std::map<size_t, size_t> free_ranges;  // offset -> size, address ordered for coalescing
  std::unordered_map<size_t, size_t> allocated;  // offset -> size
  size_t used = 0;
};

Arena g_arenas[FOO_MAX_DEVICES];

}  // namespace

bool mapDeviceMemory(int device, size_t bytes) {
  bytes = (bytes + kPage - 1) / kPage * kPage;
  char name[32];
  std::snprintf(name, sizeof(name), "foo-device-%d", device);
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  void* device_view = ok ? mmap(nullptr, bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0) : MAP_FAILED;
  // The kernel mapping lies between two read-only pages of zeros: a kernel may load an element just outside a
  // buffer and discard it (Inductor's C++ kernels do, as GPU kernels' masked loads), and at the edges of the
  // device's memory that load must not fault.
  void* guarded = ok ? mmap(nullptr, bytes + 2 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                     : MAP_FAILED;
  void* kernel_view = guarded != MAP_FAILED ? mmap(static_cast<char*>(guarded) + kPage, bytes, PROT_READ | PROT_WRITE,
                                                   MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0)
                                            : MAP_FAILED;
  close(fd);  // the mappings keep the memory alive
  if (device_view == MAP_FAILED || kernel_view == MAP_FAILED) return false;
  DeviceMemory& mem = deviceMemory(device);
  mem.device_base = static_cast<char*>(device_view);
  mem.kernel_base = static_cast<char*>(kernel_view);
  mem.size = bytes;
  g_arenas[device].free_ranges.emplace(0, bytes);
  return true;
}

}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

fooError_t fooMalloc(int device, void** dev_ptr, size_t size) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (size == 0) size = 1;
  size = (size + kPage - 1) / kPage * kPage;
  Arena& arena = g_arenas[device];
  std::lock_guard<std::mutex> lock(arena.mutex);
  for (auto it = arena.free_ranges.begin(); it != arena.free_ranges.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first;
    const size_t remaining = it->second - size;
    arena.free_ranges.erase(it);
    if (remaining > 0) arena.free_ranges.emplace(offset + size, remaining);
    arena.allocated.emplace(offset, size);
    arena.used += size;
    *dev_ptr = deviceMemory(device).device_base + offset;
    return fooSuccess;
  }
  return fooErrorMemoryAllocation;
}

fooError_t fooFree(int device, void* dev_ptr) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  // In a forked child the pages are shared with the parent, which still owns them.
  if (dev_ptr == nullptr || fooIsInBadFork()) return fooSuccess;
  DeviceMemory& mem = deviceMemory(device);
  Arena& arena = g_arenas[device];
  std::lock_guard<std::mutex> lock(arena.mutex);
  const size_t offset = static_cast<size_t>(static_cast<char*>(dev_ptr) - mem.device_base);
  auto found = arena.allocated.find(offset);
  if (found == arena.allocated.end()) return fooErrorInvalidValue;
  size_t start = offset;
  size_t size = found->second;
  arena.allocated.erase(found);
  arena.used -= size;
  madvise(mem.kernel_base + start, size, MADV_REMOVE);  // return the pages to the host
  auto next = arena.free_ranges.lower_bound(start);
  if (next != arena.free_ranges.end() && next->first == start + size) {
    size += next->second;
    next = arena.free_ranges.erase(next);
  }
  if (next != arena.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      arena.free_ranges.erase(prev);
    }
  }
  arena.free_ranges.emplace(start, size);
  return fooSuccess;
}

fooError_t fooMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  Arena& arena = g_arenas[device];
  std::lock_guard<std::mutex> lock(arena.mutex);
  *total_bytes = deviceMemory(device).size;
  *free_bytes = *total_bytes - arena.used;
  return fooSuccess;
}

int fooPointerGetDevice(const void* ptr) {
  if (!fooIsInitialized()) return -1;
  const char* p = static_cast<const char*>(ptr);
  for (int d = 0; d < deviceCount(); ++d) {
    const DeviceMemory& mem = deviceMemory(d);
    if (p >= mem.device_base && p < mem.device_base + mem.size) return d;
  }
  return -1;
}

void* fooKernelAddress(const void* dev_ptr) {
  const int d = fooPointerGetDevice(dev_ptr);
  if (d < 0) return nullptr;
  const DeviceMemory& mem = deviceMemory(d);
  return mem.kernel_base + (static_cast<const char*>(dev_ptr) - mem.device_base);
}

void* fooDeviceAddress(const void* kernel_ptr) {
  if (!fooIsInitialized()) return nullptr;
  const char* p = static_cast<const char*>(kernel_ptr);
  for (int d = 0; d < deviceCount(); ++d) {
    const DeviceMemory& mem = deviceMemory(d);
    if (p >= mem.kernel_base && p < mem.kernel_base + mem.size) return mem.device_base + (p - mem.kernel_base);
  }
  return nullptr;
}

}  // extern "C"
