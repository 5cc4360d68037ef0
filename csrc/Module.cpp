// foo_backend._C: the Python bindings (the only translation unit that includes pybind11).
#include <torch/csrc/utils/pybind.h>

#include "CachingAllocator.h"
#include "Common.h"

namespace foo {
namespace {

c10::DeviceIndex checkedIndex(int device) {
  checkDeviceIndex(static_cast<c10::DeviceIndex>(device));
  return static_cast<c10::DeviceIndex>(device);
}

}  // namespace
}  // namespace foo

PYBIND11_MODULE(_C, m) {
  using namespace foo;
  m.doc() = "foo_backend native extension: the simulated foo runtime and its PyTorch integration";

  m.def("_init", [] { FOO_CHECK(fooInit()); });
  m.def("_is_initialized", [] { return fooIsInitialized() != 0; });
  m.def("_device_count", [] { return deviceCount(); });
  m.def("_get_device", [] { return static_cast<int>(currentDevice()); });
  m.def("_set_device", [](int device) { FOO_CHECK(fooSetDevice(checkedIndex(device))); });
  m.def("_exchange_device", [](int device) {
    const int previous = currentDevice();
    if (device >= 0 && device != previous) FOO_CHECK(fooSetDevice(checkedIndex(device)));
    return previous;
  });
  m.def("_synchronize", [](int device) {
    FOO_CHECK(fooInit());
    FOO_CHECK(fooDeviceSynchronize(checkedIndex(device)));
  });
  m.def("_get_device_properties", [](int device) {
    fooDeviceProp prop;
    FOO_CHECK(fooGetDeviceProperties(&prop, checkedIndex(device)));
    return pybind11::make_tuple(std::string(prop.name), prop.totalGlobalMem, prop.major, prop.minor,
                                prop.multiProcessorCount);
  });
  m.def("_mem_get_info", [](int device) { return cachingAllocator().getMemoryInfo(checkedIndex(device)); });
  m.def("_set_memory_fraction", [](double fraction, int device) {
    cachingAllocator().setMemoryFraction(fraction, checkedIndex(device));
  });
  m.def("_empty_cache", [] { cachingAllocator().emptyCache(); });
}
