// Sharing foo storages and events with other processes (device/IpcSharing.h has the protocol).
#include "device/IpcSharing.h"

#include <ATen/MapAllocator.h>
#include <c10/util/Logging.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "device/Common.h"
#include "device/Launch.h"
#include "device/Stream.h"

namespace foo::ipc {
namespace {

// As CUDA's: a file of reference counters holds this many, and at most this many sent blocks carry an event
// (beyond, the sender waits for its stream instead).
constexpr int64_t kCountersPerFile = 10000;
constexpr int kMaxSentEvents = 1000;

int64_t* countersIn(const at::DataPtr& file) { return static_cast<int64_t*>(file.get()); }

// A shared-memory file of reference counters, handed out slot by slot.
struct CounterFile {
  std::string handle;
  at::DataPtr memory;
  int64_t next = 0;
};

// A block sent to other processes: the storage's memory, held while its counter says a receiver holds it.
struct SentData {
  std::shared_ptr<CounterFile> file;
  int64_t slot = 0;
  c10::DataPtr original;
  fooEvent_t event = nullptr;
  ~SentData();
  int64_t counter() const { return __atomic_load_n(countersIn(file->memory) + slot, __ATOMIC_ACQUIRE); }
};

struct Sent {
  std::mutex mutex;
  std::shared_ptr<CounterFile> file;  // where the next counter is taken
  std::vector<std::unique_ptr<SentData>> limbo;
  std::atomic<int> events{0};
};

Sent& sent() {
  static auto* const state = new Sent();  // never destroyed: the check at exit only reads it
  return *state;
}

SentData::~SentData() {
  if (event != nullptr) {
    fooEventDestroy(event);
    sent().events.fetch_sub(1);
  }
}

// CUDA warns the same way when a producer exits while consumers hold its memory.
struct WarnAtExit {
  ~WarnAtExit() {
    if (fooIsInBadFork()) return;  // a forked child's copy of the parent's blocks
    Sent& state = sent();
    std::lock_guard<std::mutex> lock(state.mutex);
    for (const auto& data : state.limbo) {
      if (data->counter() > 0) {
        LOG(WARNING) << "Producer process has been terminated before all shared foo tensors released. See "
                        "\"Sharing foo tensors between processes\" in foo_backend's docs/using.md";
        return;
      }
    }
  }
} g_warn_at_exit;

void deleteSentData(void* context) {
  std::unique_ptr<SentData> data(static_cast<SentData*>(context));
  if (data->counter() > 0) {
    std::lock_guard<std::mutex> lock(sent().mutex);
    sent().limbo.push_back(std::move(data));
  }
  data.reset();
  collect();
}

// A counter set to 1, for the receiver of one send.
std::pair<std::shared_ptr<CounterFile>, int64_t> newCounter() {
  Sent& state = sent();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.file == nullptr || state.file->next == kCountersPerFile) {
    static std::random_device random;
    auto file = std::make_shared<CounterFile>();
    file->handle = "/foo_" + std::to_string(getpid()) + "_" + std::to_string(random());
    file->memory = at::RefcountedMapAllocator::makeDataPtr(
        file->handle.c_str(), at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_EXCLUSIVE,
        sizeof(int64_t) * kCountersPerFile, nullptr);
    state.file = std::move(file);
  }
  const int64_t slot = state.file->next++;
  __atomic_store_n(countersIn(state.file->memory) + slot, 1, __ATOMIC_RELEASE);
  return {state.file, slot};
}

// Memory received from another process.
struct Received {
  void* base;  // the opened allocation
  c10::DeviceIndex device;
  std::string counter_handle;
  int64_t counter_offset;
  bool counter_released = false;  // by releaseReceivedAtExit
  // Unmaps the memory and gives the counter back. However it ends, it leaves the registry below.
  void finish();
  ~Received();
};

// The received memory this process holds, for releaseReceivedAtExit.
struct Holding {
  std::mutex mutex;
  std::unordered_set<Received*> received;
};

Holding& holding() {
  static auto* const state = new Holding();
  return *state;
}

void Received::finish() {
  bool release_counter = false;
  {
    std::lock_guard<std::mutex> lock(holding().mutex);
    holding().received.erase(this);
    release_counter = !counter_released;
  }
  fooIpcCloseMemHandle(base);
  if (release_counter) releaseCounter(counter_handle, counter_offset);
}

Received::~Received() {
  std::lock_guard<std::mutex> lock(holding().mutex);
  holding().received.erase(this);  // a forked child's, which releases nothing
}

// Releases received memory for deleters that run on a stream worker, which cannot wait for a stream: a thread
// of its own waits, then releases.
class DeferredReleases {
 public:
  void add(std::unique_ptr<Received> received, fooStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      std::thread([this] { run(); }).detach();  // lives as long as the process
      started_ = true;
    }
    pending_.emplace_back(std::move(received), stream);
    ready_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return !pending_.empty(); });
      auto [received, stream] = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      fooStreamSynchronize(received->device, stream);
      received->finish();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<std::unique_ptr<Received>, fooStream_t>> pending_;
  bool started_ = false;
};

DeferredReleases& deferredReleases() {
  static auto* const releases = new DeferredReleases();
  return *releases;
}

void releaseReceived(void* context) {
  std::unique_ptr<Received> received(static_cast<Received*>(context));
  if (fooIsInBadFork()) return;  // the parent's to release
  const fooStream_t stream = currentStream(received->device);
  if (onStreamWorker()) {
    deferredReleases().add(std::move(received), stream);
    return;
  }
  // As CUDA: the work queued on the current stream is done before the sender may reuse the memory.
  fooStreamSynchronize(received->device, stream);
  received->finish();
}

std::string handleBytes(const void* handle) {
  return std::string(static_cast<const char*>(handle), FOO_IPC_HANDLE_SIZE);
}

template <class Handle>
Handle handleFrom(const std::string& bytes, const char* what) {
  TORCH_CHECK(bytes.size() == FOO_IPC_HANDLE_SIZE, "foo: ", what, " handle has ", bytes.size(), " bytes, expected ",
              FOO_IPC_HANDLE_SIZE);
  Handle handle;
  std::memcpy(handle.reserved, bytes.data(), FOO_IPC_HANDLE_SIZE);
  return handle;
}

// The errors of opening what another process shared, worded for the user.
void checkOpened(fooError_t error, const char* what) {
  TORCH_CHECK(error != fooErrorInvalidDevice, "foo: cannot open ", what,
              " shared by a process that sees other foo devices: both processes must have the same "
              "FOO_DEVICE_COUNT (this one has ", deviceCount(), ")");
  TORCH_CHECK(error != fooErrorInvalidIpcHandle, "foo: cannot open ", what,
              " shared by another process: that process has exited (a producer must keep its foo tensors alive "
              "until its consumers have received them, as with CUDA)");
  FOO_CHECK(error);
}

}  // namespace

SharedStorage shareStorage(c10::StorageImpl& storage) {
  SharedStorage shared;
  shared.device = storage.device().index();
  shared.bytes = storage.nbytes();
  if (storage.data() == nullptr) return shared;
  void* data = storage.mutable_data();
  void* base = nullptr;
  size_t allocation = 0;
  fooIpcMemHandle_t handle;
  TORCH_CHECK(fooMemGetAddressRange(&base, &allocation, data) == fooSuccess &&
                  fooIpcGetMemHandle(&handle, data) == fooSuccess,
              "foo: this storage's memory is not foo device memory, and cannot be shared with other processes");
  shared.handle = handleBytes(handle.reserved);
  shared.offset = static_cast<size_t>(static_cast<char*>(data) - static_cast<char*>(base));

  auto [file, slot] = newCounter();
  auto data_sent = std::make_unique<SentData>();
  data_sent->file = std::move(file);
  data_sent->slot = slot;
  shared.counter_handle = data_sent->file->handle;
  shared.counter_offset = slot;
  const fooStream_t stream = currentStream(shared.device);
  if (sent().events.fetch_add(1) < kMaxSentEvents && fooEventCreateInterprocess(&data_sent->event) == fooSuccess) {
    FOO_CHECK(fooEventRecord(data_sent->event, shared.device, stream));
    fooIpcEventHandle_t event_handle;
    FOO_CHECK(fooIpcGetEventHandle(&event_handle, data_sent->event));
    shared.event_handle = handleBytes(event_handle.reserved);
    shared.event_sync_required = true;
  } else {
    if (data_sent->event == nullptr) sent().events.fetch_sub(1);
    // As CUDA past its limit of events: the sender's queued work is done before the receiver uses the memory.
    beforeHostWait("sharing a foo tensor with another process");
    synchronizeStream(shared.device, stream);
    shared.event_handle = std::string(FOO_IPC_HANDLE_SIZE, '\0');
  }
  SentData* context = data_sent.release();
  context->original = storage.set_data_ptr(c10::DataPtr(data, context, &deleteSentData, storage.device()));
  return shared;
}

c10::intrusive_ptr<c10::StorageImpl> newSharedStorage(const SharedStorage& shared) {
  const c10::DeviceIndex device = shared.device;
  const c10::Device where = fooDevice(device);
  TORCH_CHECK(device >= 0 && device < deviceCount(), "foo: cannot open foo memory of foo:", static_cast<int>(device),
              " shared by another process: this process has ", deviceCount(), " foo devices (FOO_DEVICE_COUNT)");
  if (shared.event_sync_required) {
    fooEvent_t event = nullptr;
    checkOpened(fooIpcOpenEventHandle(&event, handleFrom<fooIpcEventHandle_t>(shared.event_handle, "an event")),
                "an event");
    const fooError_t waited = fooStreamWaitEvent(device, currentStream(device), event);
    fooEventDestroy(event);
    FOO_CHECK(waited);
  }
  void* base = nullptr;
  checkOpened(fooIpcOpenMemHandle(&base, handleFrom<fooIpcMemHandle_t>(shared.handle, "a memory")), "foo memory");
  auto received = std::make_unique<Received>(Received{base, device, shared.counter_handle, shared.counter_offset});
  {
    std::lock_guard<std::mutex> lock(holding().mutex);
    holding().received.insert(received.get());
  }
  c10::DataPtr data(static_cast<char*>(base) + shared.offset, received.release(), &releaseReceived, where);
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), shared.bytes,
                                                       std::move(data), /*allocator=*/nullptr, /*resizable=*/false);
  storage->set_received_cuda(true);  // PyTorch's flag for memory received from another process
  return storage;
}

void releaseCounter(const std::string& counter_handle, int64_t counter_offset) {
  // Best effort, as CUDA's: the sender may have exited already (and warned).
  try {
    at::DataPtr file = at::RefcountedMapAllocator::makeDataPtr(
        counter_handle.c_str(), at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_NOCREATE,
        sizeof(int64_t) * kCountersPerFile, nullptr);
    __atomic_fetch_sub(countersIn(file) + counter_offset, 1, __ATOMIC_ACQ_REL);
  } catch (const c10::Error&) {
  }
}

void releaseReceivedAtExit() {
  std::lock_guard<std::mutex> lock(holding().mutex);
  for (Received* received : holding().received) {
    if (!received->counter_released) releaseCounter(received->counter_handle, received->counter_offset);
    received->counter_released = true;
  }
}

bool collect() {
  std::vector<std::unique_ptr<SentData>> released;
  {
    Sent& state = sent();
    std::lock_guard<std::mutex> lock(state.mutex);
    std::vector<std::unique_ptr<SentData>> kept;
    for (auto& data : state.limbo) (data->counter() > 0 ? kept : released).push_back(std::move(data));
    state.limbo = std::move(kept);
  }
  return !released.empty();  // their blocks go back to the caching allocator here, outside the lock
}

void createInterprocessEvent(c10::Event& event, c10::DeviceIndex device) {
  fooEvent_t created = nullptr;
  FOO_CHECK(fooEventCreateInterprocess(&created));
  adoptEvent(event, created, device);
}

std::string eventHandle(const c10::Event& event) {
  fooIpcEventHandle_t handle;
  TORCH_CHECK(event.eventId() != nullptr &&
                  fooIpcGetEventHandle(&handle, static_cast<fooEvent_t>(event.eventId())) == fooSuccess,
              "foo: only an event created with interprocess=True in this process can be shared with other processes");
  return handleBytes(handle.reserved);
}

void openEventHandle(c10::Event& event, c10::DeviceIndex device, const std::string& handle) {
  fooEvent_t opened = nullptr;
  checkOpened(fooIpcOpenEventHandle(&opened, handleFrom<fooIpcEventHandle_t>(handle, "an event")), "an event");
  adoptEvent(event, opened, device);
}

}  // namespace foo::ipc
