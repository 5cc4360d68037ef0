// Runtime tests: device memory (one allocation, two mappings; accounting) and pinned host memory.
#include "harness.h"

namespace runtime_tests {
namespace {

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

}  // namespace
}  // namespace runtime_tests
