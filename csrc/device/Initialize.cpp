// foo_backend_init (foo_backend/include/foo_backend/foo.h): what a process does once before it uses foo, after
// foo's device library is loaded (its static registrations done): the device's name, the routing of composite
// operators to CPU's kernels, the profiler. foo_backend._C calls it when Python imports it; a C++ program calls
// it itself.
#include <foo_backend/foo.h>

#include <c10/core/DeviceType.h>

#include <mutex>

#include "execution/Fallback.h"
#include "profiler/Profiler.h"

void foo_backend_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::register_privateuse1_backend("foo");
    foo::routeCompositeOperatorsToCpuKernels();
    foo::registerProfiler();
    foo::registerProfilerEventStubs();
  });
}
