// Runtime tests: devices (their count, validity, the current device, properties), and a child forked
// after initialisation.
#include "harness.h"

namespace runtime_tests {
namespace {

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

}  // namespace
}  // namespace runtime_tests
