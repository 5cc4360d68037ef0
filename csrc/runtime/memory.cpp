// Device memory: each device is one memfd behind two views (no-access device addresses, read/write kernel
// view; internal.h). fooMalloc carves page-aligned ranges out of it first fit; fooFree punches the pages
// out so the host gets them back, as freeing device memory would.
#include "foo_runtime.h"
#include "internal.h"

#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <map>
#include <mutex>

namespace foo_runtime {

bool RangeAllocator::allocate(size_t bytes, size_t* offset) {
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    if (it->second < bytes) continue;
    *offset = it->first;
    const size_t remaining = it->second - bytes;
    free_ranges_.erase(it);
    if (remaining > 0) free_ranges_.emplace(*offset + bytes, remaining);
    allocated_.emplace(*offset, bytes);
    used_ += bytes;
    return true;
  }
  return false;
}

bool RangeAllocator::release(size_t offset) {
  auto found = allocated_.find(offset);
  if (found == allocated_.end()) return false;
  size_t start = offset;
  size_t size = found->second;
  allocated_.erase(found);
  used_ -= size;
  auto next = free_ranges_.lower_bound(start);
  if (next != free_ranges_.end() && next->first == start + size) {
    size += next->second;
    next = free_ranges_.erase(next);
  }
  if (next != free_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_ranges_.erase(prev);
    }
  }
  free_ranges_.emplace(start, size);
  return true;
}

bool RangeAllocator::containing(size_t offset, size_t* start, size_t* bytes) const {
  auto it = allocated_.upper_bound(offset);
  if (it == allocated_.begin()) return false;
  --it;
  if (offset >= it->first + it->second) return false;
  *start = it->first;
  *bytes = it->second;
  return true;
}

bool mapDeviceMemory(int device, size_t bytes) {
  bytes = roundToPages(bytes);
  // Room for what other processes share: their devices may be as large as this one, and several may share.
  const size_t window = 4 * bytes;
  const int fd = memfd_create(deviceFileName(device).c_str(), MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return false;
  }
  void* device_view = mmap(nullptr, bytes + window, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  // The kernel view lies between two read-only pages of zeros, and reads zeros where nothing is mapped in the
  // window: a kernel may load an element just outside a buffer and discard it (Inductor's C++ kernels do, as
  // GPU kernels' masked loads), and at the edges of mapped memory that load must not fault.
  void* guarded = mmap(nullptr, bytes + window + 2 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
  void* kernel_view = guarded != MAP_FAILED ? mmap(static_cast<char*>(guarded) + kPage, bytes, PROT_READ | PROT_WRITE,
                                                   MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0)
                                            : MAP_FAILED;
  if (device_view == MAP_FAILED || kernel_view == MAP_FAILED) {
    close(fd);
    return false;
  }
  DeviceMemory& mem = deviceMemory(device);
  mem.device_base = static_cast<char*>(device_view);
  mem.kernel_base = static_cast<char*>(kernel_view);
  mem.size = bytes;
  mem.window = window;
  mem.fd = fd;
  mem.own.init(bytes);
  mem.imports.init(window);
  return true;
}

}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

fooError_t fooMalloc(int device, void** dev_ptr, size_t size) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  DeviceMemory& mem = deviceMemory(device);
  std::lock_guard<std::mutex> lock(mem.mutex);
  size_t offset = 0;
  if (!mem.own.allocate(roundToPages(size == 0 ? 1 : size), &offset)) return fooErrorMemoryAllocation;
  *dev_ptr = mem.device_base + offset;
  return fooSuccess;
}

fooError_t fooFree(int device, void* dev_ptr) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  // In a forked child the pages are shared with the parent, which still owns them.
  if (dev_ptr == nullptr || fooIsInBadFork()) return fooSuccess;
  DeviceMemory& mem = deviceMemory(device);
  const char* p = static_cast<const char*>(dev_ptr);
  if (p < mem.device_base || p >= mem.device_base + mem.size) return fooErrorInvalidValue;
  const size_t offset = static_cast<size_t>(p - mem.device_base);
  std::lock_guard<std::mutex> lock(mem.mutex);
  size_t start = 0, bytes = 0;
  if (!mem.own.containing(offset, &start, &bytes) || start != offset) return fooErrorInvalidValue;
  madvise(mem.kernel_base + start, bytes, MADV_REMOVE);  // return the pages to the host
  mem.own.release(start);
  return fooSuccess;
}

fooError_t fooMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  DeviceMemory& mem = deviceMemory(device);
  std::lock_guard<std::mutex> lock(mem.mutex);
  *total_bytes = mem.size;
  *free_bytes = mem.size - mem.own.used();
  return fooSuccess;
}

fooError_t fooMemGetAddressRange(void** base, size_t* bytes, const void* dev_ptr) {
  const int d = fooPointerGetDevice(dev_ptr);
  if (d < 0) return fooErrorInvalidValue;
  DeviceMemory& mem = deviceMemory(d);
  const size_t offset = static_cast<size_t>(static_cast<const char*>(dev_ptr) - mem.device_base);
  std::lock_guard<std::mutex> lock(mem.mutex);
  size_t start = 0;
  const bool found = offset < mem.size ? mem.own.containing(offset, &start, bytes)
                                       : mem.imports.containing(offset - mem.size, &start, bytes);
  if (!found) return fooErrorInvalidValue;
  *base = mem.device_base + (offset < mem.size ? start : mem.size + start);
  return fooSuccess;
}

int fooPointerGetDevice(const void* ptr) {
  if (!fooIsInitialized()) return -1;
  const char* p = static_cast<const char*>(ptr);
  for (int d = 0; d < deviceCount(); ++d) {
    if (deviceMemory(d).contains(p)) return d;
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
    if (p >= mem.kernel_base && p < mem.kernel_base + mem.size + mem.window) return mem.device_base + (p - mem.kernel_base);
  }
  return nullptr;
}

}  // extern "C"
