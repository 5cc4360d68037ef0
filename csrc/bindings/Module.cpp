// foo_backend._C: the Python bindings. bindings/ holds the only files that include pybind11; the memory
// snapshot's dictionary is in MemorySnapshot.cpp.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include <foo_backend/foo.h>

#include "bindings/MemorySnapshot.h"
#include "compiled/CompiledKernel.h"
#include "device/CachingAllocator.h"
#include "device/Common.h"
#include "device/Generator.h"
#include "device/IpcSharing.h"
#include "device/Launch.h"
#include "device/Sanitizer.h"
#include "distributed/ProcessGroupFoo.h"
#include "execution/Fallback.h"
#include "execution/QueuedLaunch.h"
#include "graphs/FooGraph.h"

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

// Declared in torch/csrc/profiler/python/combined_traceback.h, whose includes (nlohmann's JSON) the wheel lacks.
namespace torch {
TORCH_API void installCapturedTracebackPython();
}  // namespace torch

namespace foo {
namespace {

// The holder of a Python object over a c10d backend: the last reference ends the backend's gloo groups, whose
// destructors join gloo's worker threads, and a worker finishing a work may need the GIL to free its tensors.
// So the reference is dropped without the GIL, as PyTorch's own c10d bindings drop theirs.
template <typename T>
class ReleasesGilWhenLast {
 public:
  ReleasesGilWhenLast() = default;
  ReleasesGilWhenLast(c10::intrusive_ptr<T> object) : object_(std::move(object)) {}  // NOLINT: pybind11 converts
  explicit ReleasesGilWhenLast(T* object) : object_(c10::intrusive_ptr<T>::unsafe_steal_from_new(object)) {}
  ReleasesGilWhenLast(const ReleasesGilWhenLast&) = default;
  ReleasesGilWhenLast(ReleasesGilWhenLast&&) noexcept = default;
  ReleasesGilWhenLast& operator=(const ReleasesGilWhenLast&) = default;
  ReleasesGilWhenLast& operator=(ReleasesGilWhenLast&&) noexcept = default;
  ~ReleasesGilWhenLast() {
    if (object_ && PyGILState_Check()) {
      pybind11::gil_scoped_release no_gil;
      object_.reset();
    }
  }
  T* get() const noexcept { return object_.get(); }
  T& operator*() const noexcept { return *object_; }
  T* operator->() const noexcept { return object_.get(); }

 private:
  c10::intrusive_ptr<T> object_;
};

c10::DeviceIndex checkedIndex(int device) {
  checkDeviceIndex(static_cast<c10::DeviceIndex>(device));
  return static_cast<c10::DeviceIndex>(device);
}

pybind11::dict statDict(const c10::CachingAllocator::Stat& stat) {
  pybind11::dict d;
  d["current"] = stat.current;
  d["peak"] = stat.peak;
  d["allocated"] = stat.allocated;
  d["freed"] = stat.freed;
  return d;
}

pybind11::dict durationDict(const c10::CachingAllocator::DurationStat& stat) {
  pybind11::dict d;
  d["total"] = stat.total;
  d["max"] = stat.max;
  d["min"] = stat.min;
  d["count"] = stat.count;
  d["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return d;
}

// The pinned host allocator's statistics, nested as torch.cuda.host_memory_stats_as_nested_dict().
pybind11::dict hostMemoryStats() {
  const at::HostStats stats = at::getHostAllocator(at::kPrivateUse1)->get_stats();
  pybind11::dict d;
  d["allocations"] = statDict(stats.allocations);
  d["allocated_bytes"] = statDict(stats.allocated_bytes);
  d["active_requests"] = statDict(stats.active_requests);
  d["active_bytes"] = statDict(stats.active_bytes);
  d["num_host_alloc"] = stats.num_host_alloc;
  d["num_host_free"] = stats.num_host_free;
  d["host_alloc_time"] = durationDict(stats.host_alloc_time);
  d["host_free_time"] = durationDict(stats.host_free_time);
  return d;
}

using c10::CachingDeviceAllocator::RecordContext;

std::shared_ptr<c10::GatheredContext> gatherPythonStack() { return torch::CapturedTraceback::gather(true, true, false); }
std::shared_ptr<c10::GatheredContext> gatherPythonAndCppStack() {
  return torch::CapturedTraceback::gather(true, true, true);
}

// The sanitizer's stacks: Python frames only, printed as a Python traceback (most recent call last).
std::shared_ptr<c10::GatheredContext> gatherSanitizerStack() { return torch::CapturedTraceback::gather(true, false, false); }
std::string formatSanitizerStack(const c10::GatheredContext& stack) {
  auto* traceback = const_cast<torch::CapturedTraceback*>(static_cast<const torch::CapturedTraceback*>(&stack));
  const torch::SymbolizedTracebacks symbolized = torch::symbolize({traceback});
  std::string text;
  const std::vector<uint64_t>& frames = symbolized.tracebacks.at(0);
  // The innermost frames: a test runner's dozens of outer frames say nothing of the bug.
  constexpr size_t kFrames = 16;
  if (frames.size() > kFrames) text = "  ... (" + std::to_string(frames.size() - kFrames) + " outer frames)\n";
  for (auto it = frames.rbegin() + (frames.size() > kFrames ? frames.size() - kFrames : 0); it != frames.rend(); ++it) {
    const auto& frame = symbolized.all_frames.at(*it);
    text += "  File \"" + frame.filename + "\", line " + std::to_string(frame.lineno) + ", in " + frame.funcname + "\n";
  }
  return text;
}

// torch.foo.memory._record_memory_history's arguments, as torch.cuda.memory's.
void recordMemoryHistory(const std::optional<std::string>& enabled, const std::optional<std::string>& context,
                         const std::string& stacks, size_t max_entries, bool clear_history) {
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "foo: _record_memory_history: enabled must be None, 'state' or 'all', not '", *enabled, "'");
  TORCH_CHECK(!context || *context == "state" || *context == "alloc" || *context == "all",
              "foo: _record_memory_history: context must be None, 'state', 'alloc' or 'all', not '", *context, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "foo: _record_memory_history: stacks must be 'python' or 'all', not '", stacks, "'");
  RecordContext when = RecordContext::NEVER;
  if (enabled && context) {
    when = *context == "state" ? RecordContext::STATE : *context == "alloc" ? RecordContext::ALLOC : RecordContext::ALL;
    torch::installCapturedTracebackPython();
  }
  const c10::CachingDeviceAllocator::CreateContextFn recorder =
      when == RecordContext::NEVER ? nullptr : stacks == "python" ? &gatherPythonStack : &gatherPythonAndCppStack;
  cachingAllocator().recordHistory(enabled && *enabled == "all", recorder, when, max_entries, clear_history);
}

}  // namespace
}  // namespace foo

PYBIND11_DECLARE_HOLDER_TYPE(T, foo::ReleasesGilWhenLast<T>, true);

PYBIND11_MODULE(_C, m) {
  using namespace foo;
  m.doc() = "foo_backend native extension: the simulated foo runtime and its PyTorch integration";
  foo_backend_init();

  m.def("_init", [] {
    FOO_CHECK(fooInit());
    // A child forked from now on must initialise foo again, which it cannot: factory functions then
    // call torch.foo._lazy_init, which raises the bad-fork error.
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
  });
  m.def("_is_initialized", [] { return fooIsInitialized() != 0; });
  m.def("_is_in_bad_fork", [] { return fooIsInBadFork() != 0; });
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
    const c10::DeviceIndex index = checkedIndex(device);
    const pybind11::gil_scoped_release no_gil;
    synchronizeDevice(index);
  });
  // Waits for every stream of the device without reporting asynchronous errors (the next
  // synchronization reports them, as it would have anyway).
  m.def("_wait_for_device", [](int device) {
    beforeHostWait("queued kernels read the default dtype");
    const pybind11::gil_scoped_release no_gil;
    FOO_CHECK(fooDeviceSynchronize(checkedIndex(device)));
  });
  m.def("_set_sync_debug_mode", [](int64_t mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0,1, 2");
    setSyncDebugMode(static_cast<SyncDebugMode>(mode));
  });
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(syncDebugMode()); });
  m.def("_host_wait_count", [] { return hostWaitCount(); });
  m.def("_forget_launch_plans", [] { forgetLaunchPlans(); });
  m.def("_queue_despite_tags", [](const std::string& op_name, bool queue) { queueDespiteTags(op_name, queue); });
  // As torch.cuda._sleep: keeps the current stream busy for `cycles` cycles of a 1 GHz device.
  m.def("_sanitizer_enable", [](bool warn_only, bool check_initialization) {
    torch::installCapturedTracebackPython();
    sanitizer::setStackFunctions(&gatherSanitizerStack, &formatSanitizerStack);
    sanitizer::enable(warn_only, check_initialization);
  });
  m.def("_sanitizer_disable", &sanitizer::disable);
  m.def("_sanitizer_enabled", &sanitizer::enabled);
  m.def("_sleep", [](int64_t cycles) {
    const c10::DeviceIndex device = currentDevice();
    enqueueOnStream(device, "_sleep", [cycles] { std::this_thread::sleep_for(std::chrono::nanoseconds(cycles)); });
  });
  // Keeps the current stream busy until the returned function is called: "the stream is still busy"
  // without depending on how fast the host is (tests). A hold never released (or waited for by the
  // host that holds it: a first call of an operator does) fails after 2 minutes.
  m.def("_hold_stream", [] {
    auto release = std::make_shared<std::promise<void>>();
    std::shared_future<void> released = release->get_future().share();
    enqueueOnStream(currentDevice(), "_hold_stream", [released] {
      TORCH_CHECK(released.wait_for(std::chrono::minutes(2)) == std::future_status::ready,
                  "foo: a stream held by _hold_stream was never released");
    });
    auto once = std::make_shared<std::once_flag>();
    return pybind11::cpp_function([release, once] { std::call_once(*once, [&] { release->set_value(); }); });
  });
  // Event.elapsed_time for torch.foo.Event, which torch.Event.elapsed_time does not accept as its argument.
  // The ids are torch.Event.event_id: the runtime event behind a recorded event, 0 before its first record.
  m.def("_event_elapsed_time", [](int64_t start, int64_t end) {
    TORCH_CHECK_VALUE(start != 0 && end != 0, "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    const fooError_t error =
        fooEventElapsedTime(&ms, reinterpret_cast<fooEvent_t>(start), reinterpret_cast<fooEvent_t>(end));
    TORCH_CHECK_VALUE(error != fooErrorInvalidValue,
                      "Both events must be created with argument 'enable_timing=True' to measure elapsed time.");
    FOO_CHECK(error);
    return ms;
  });
  // Sharing with other processes (foo_backend/_multiprocessing.py): a storage's _share_device_ tuple (CUDA's
  // _share_cuda_), the storage over memory another process shared, and a counter given back unused.
  m.def("_share_storage", [](py::handle storage) {
    const ipc::SharedStorage shared = ipc::shareStorage(*THPStorage_Unpack(storage.ptr()).unsafeGetStorageImpl());
    return py::make_tuple(shared.device, shared.handle.empty() ? py::object(py::none()) : py::bytes(shared.handle),
                          shared.bytes, shared.offset, py::bytes(shared.counter_handle), shared.counter_offset,
                          py::bytes(shared.event_handle), shared.event_sync_required);
  });
  m.def("_new_shared_storage", [](int device, const std::string& handle, size_t bytes, size_t offset,
                                  const std::string& counter_handle, int64_t counter_offset,
                                  const std::string& event_handle, bool event_sync_required) {
    ipc::SharedStorage shared{static_cast<c10::DeviceIndex>(device), handle, bytes, offset, counter_handle,
                              counter_offset, event_handle, event_sync_required};
    c10::Storage storage(ipc::newSharedStorage(shared));
    return py::reinterpret_steal<py::object>(THPStorage_NewWithStorage(THPStorageClass, std::move(storage)));
  });
  m.def("_release_ipc_counter", &ipc::releaseCounter);
  m.def("_ipc_collect", &ipc::collect);
  m.def("_create_interprocess_event", [](py::handle event, int device) {
    ipc::createInterprocessEvent(reinterpret_cast<THPEvent*>(event.ptr())->event, checkedIndex(device));
  });
  m.def("_event_ipc_handle", [](py::handle event) {
    return py::bytes(ipc::eventHandle(reinterpret_cast<THPEvent*>(event.ptr())->event));
  });
  m.def("_open_event_ipc_handle", [](py::handle event, int device, const std::string& handle) {
    ipc::openEventHandle(reinterpret_cast<THPEvent*>(event.ptr())->event, checkedIndex(device), handle);
  });
  m.def("_stream_priority", [](int device, int64_t stream) {
    int priority = 0;
    FOO_CHECK(fooStreamGetPriority(checkedIndex(device), stream, &priority));
    return priority;
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
  m.def("_fail_allocation", [](int64_t allocations, int device) {
    cachingAllocator().failAllocation(checkedIndex(device), allocations);
  });
  m.def("_fail_launch", [](std::string op, int device) { armLaunchFailure(checkedIndex(device), std::move(op)); });
  m.def("_lose_device", [](int64_t launches, int device) { loseDevice(checkedIndex(device), launches); });
  m.def("_restore_device", [](int device) { restoreDevice(checkedIndex(device)); });
  m.def("_empty_cache", [] { cachingAllocator().emptyCache(); });
  m.def("_record_memory_history", &recordMemoryHistory);
  m.def("_register_graph_impl", &registerGraphImpl);
  m.def("_graph_pool_handle", &newGraphPoolHandle);
  // torch.foo.MemPool and use_mem_pool: private pools of the caching allocator, by id (from the ids of graph pools).
  m.def("_mem_pool_create", [](int device) {
    const c10::MempoolId_t id = newGraphPoolHandle();
    cachingAllocator().createPool(checkedIndex(device), id);
    return id;
  });
  m.def("_mem_pool_use_count", [](int device, c10::MempoolId_t id) {
    return cachingAllocator().poolUseCount(checkedIndex(device), id);
  });
  m.def("_begin_allocate_current_thread_to_pool", [](int device, c10::MempoolId_t id) {
    cachingAllocator().beginAllocateCurrentThreadToPool(checkedIndex(device), id);
  });
  m.def("_end_allocate_to_pool", [](int device, c10::MempoolId_t id) {
    cachingAllocator().endAllocateToPool(checkedIndex(device), id);
  });
  m.def("_release_pool", [](int device, c10::MempoolId_t id) {
    cachingAllocator().releasePool(checkedIndex(device), id);
  });
  // torch.foo.caching_allocator_alloc/delete; the delete is also CUDA's raw_delete for graph trees.
  m.def("_caching_allocator_alloc", [](int device, size_t size) {
    c10::DataPtr owned = cachingAllocator().allocateOn(checkedIndex(device), size);
    return reinterpret_cast<uint64_t>(owned.release_context());  // the caller owns the block now
  });
  m.def("_caching_allocator_delete", [](uint64_t ptr) { cachingAllocator().raw_deleter()(reinterpret_cast<void*>(ptr)); });
  // What Inductor's graph trees ask of torch._C's CUDA functions, for foo (storages by their StorageImpl address,
  // as StorageWeakRef.cdata gives it).
  m.def("_check_pool_live_allocations", [](int device, c10::MempoolId_t id, const std::vector<uint64_t>& ptrs) {
    std::unordered_set<void*> expected;
    for (const uint64_t ptr : ptrs) expected.insert(reinterpret_cast<void*>(ptr));
    return cachingAllocator().checkPoolLiveAllocations(checkedIndex(device), id, expected);
  });
  m.def("_is_history_enabled", &CachingAllocator::historyEnabled);
  m.def("_has_standard_deleter", [](uint64_t storage) {
    return CachingAllocator::ownsBlock(reinterpret_cast<c10::StorageImpl*>(storage)->data_ptr());
  });
  m.def("_free_and_remove_deleter_fn", [](uint64_t storage) {
    cachingAllocator().freeAndDisown(reinterpret_cast<c10::StorageImpl*>(storage)->mutable_data_ptr());
  });
  m.def("_set_storage_access_error_msg", [](const at::Tensor& tensor, std::string message) {
    tensor.unsafeGetTensorImpl()->release_storage_and_set_meta_custom_data_ptr_error_msg_(std::move(message));
  });
  m.def("_set_storage_data_ptr_access_error_msg", [](uint64_t storage, std::string message) {
    reinterpret_cast<c10::StorageImpl*>(storage)->release_data_and_set_meta_custom_data_ptr_error_msg_(std::move(message));
  });
  pybind11::class_<PoolCheckpoint, std::shared_ptr<PoolCheckpoint>>(m, "_PoolCheckpoint");
  m.def("_get_checkpoint_state", [](int device, c10::MempoolId_t id) {
    return std::make_shared<PoolCheckpoint>(cachingAllocator().checkpointPool(checkedIndex(device), id));
  });
  // As torch._C._cuda_setCheckpointPoolState: `stale` storages stop owning their memory; the checkpoint's allocated
  // blocks go to the `live` storages pointing at them (which must own nothing); a block none claims stays allocated
  // (graph trees free it with a raw delete). Returns the addresses of the blocks the restoration freed.
  m.def("_set_checkpoint_pool_state", [](int device, const PoolCheckpoint& checkpoint, const std::vector<uint64_t>& stale,
                                         const std::vector<uint64_t>& live) {
    for (const uint64_t storage : stale) {
      c10::DataPtr& data = reinterpret_cast<c10::StorageImpl*>(storage)->mutable_data_ptr();
      if (CachingAllocator::ownsBlock(data)) data.release_context();
    }
    std::unordered_map<void*, c10::StorageImpl*> claims;
    for (const uint64_t storage : live) {
      auto* impl = reinterpret_cast<c10::StorageImpl*>(storage);
      TORCH_CHECK(!CachingAllocator::ownsBlock(impl->data_ptr()), "foo: a live storage given to "
                  "_set_checkpoint_pool_state already owns its memory");
      claims.emplace(impl->mutable_data(), impl);
    }
    CachingAllocator::CheckpointDelta delta = cachingAllocator().restorePool(checkedIndex(device), checkpoint);
    for (c10::DataPtr& block : delta.allocated) {
      auto claim = claims.find(block.get());
      if (claim != claims.end()) {
        claim->second->set_data_ptr_noswap(std::move(block));
      } else {
        block.release_context();
      }
    }
    std::vector<uint64_t> freed;
    for (void* ptr : delta.freed) freed.push_back(reinterpret_cast<uint64_t>(ptr));
    return freed;
  });
  m.def("_is_current_stream_capturing", &currentStreamIsCapturing);
  m.def("_memory_snapshot", [] { return snapshotToPython(cachingAllocator().snapshot()); });
  m.def("_host_memory_stats", &hostMemoryStats);
  m.def("_reset_peak_host_memory_stats", [] { at::getHostAllocator(at::kPrivateUse1)->reset_peak_stats(); });
  m.def("_reset_accumulated_host_memory_stats",
        [] { at::getHostAllocator(at::kPrivateUse1)->reset_accumulated_stats(); });
  m.def("_default_generator", [](int device) {
    return pybind11::reinterpret_steal<pybind11::object>(THPGenerator_initDefaultGenerator(defaultGenerator(checkedIndex(device))));
  });
  // The c10d backend for foo ("fccl"); foo_backend.distributed creates it around two gloo groups.
  pybind11::class_<ProcessGroupFoo, c10d::Backend, ReleasesGilWhenLast<ProcessGroupFoo>>(m, "ProcessGroupFoo")
      .def(pybind11::init<c10::intrusive_ptr<c10d::Backend>, c10::intrusive_ptr<c10d::Backend>, int, int,
                          std::chrono::milliseconds>(),
           pybind11::arg("device_gloo"), pybind11::arg("host_gloo"), pybind11::arg("rank"), pybind11::arg("size"),
           pybind11::arg("timeout"), pybind11::call_guard<pybind11::gil_scoped_release>());
  // A kernel torch.compile generated for foo (foo_backend.inductor): calling it launches it.
  pybind11::class_<CompiledKernel>(m, "CompiledKernel")
      .def(pybind11::init<std::string, uintptr_t, const std::vector<std::string>&>(), pybind11::arg("name"),
           pybind11::arg("entry"), pybind11::arg("parameter_types"))
      .def_property_readonly("name", &CompiledKernel::name)
      .def("__call__", [](const CompiledKernel& kernel, pybind11::args args) {
        std::vector<CompiledKernel::Argument> arguments(args.size());
        for (size_t i = 0; i < args.size(); ++i) {
          PyObject* arg = args[i].ptr();
          CompiledKernel::Argument& a = arguments[i];
          if (THPVariable_Check(arg)) {
            a.tensor = THPVariable_Unpack(arg);
          } else if (PyFloat_Check(arg)) {
            a.is_floating = true;
            a.floating = PyFloat_AS_DOUBLE(arg);
          } else {
            a.integer = pybind11::cast<int64_t>(args[i]);
          }
        }
        // Without the GIL: a launch waits while another thread's synchronous run holds the stream, and
        // that run may need the GIL (a kernel written in Python).
        const pybind11::gil_scoped_release no_gil;
        kernel.launch(std::move(arguments));
      });
  // Works around a shutdown race in PyTorch's autograd engine (the pytorch#38230 family): a device
  // thread that drops the last reference to a finished graph after Python began finalizing needs
  // the GIL, is killed inside a destructor, and the process aborts. A device thread releases each
  // graph before it takes the next task, so running one graph without Python objects through every
  // foo device thread (at exit, while Python is alive) guarantees earlier graphs are gone.
  // Then every stream finishes its queued kernels, so none runs while the process tears down, and the memory
  // received from other processes is given back to them.
  m.def("_finish_work_at_exit", [] {
    if (!fooIsInitialized()) return;
    setSyncDebugMode(SyncDebugMode::kDefault);  // this work is foo's own, not the program's
    const pybind11::gil_scoped_release no_gil;
    for (int d = 0; d < deviceCount(); ++d) {
      at::Tensor leaf = at::ones({1}, at::TensorOptions().device(fooDevice(static_cast<c10::DeviceIndex>(d))));
      leaf.requires_grad_(true);
      leaf.sum().backward();
    }
    for (int d = 0; d < deviceCount(); ++d) fooDeviceSynchronize(d);  // errors of abandoned work stay unreported
    ipc::releaseReceivedAtExit();
  });
}
