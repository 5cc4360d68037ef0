// Sharing device memory and events with other processes (fooIpc*, fooEventCreateInterprocess), as CUDA IPC.
// A process's device memory is one memfd per device, and the counters of its interprocess events live in one
// more memfd; each file's name holds the random token of the process that made it. A handle names the file,
// the process and descriptor through which another process opens it (/proc/<pid>/fd/<fd>), and the part of it
// meant. An importer maps the bytes into its device's window (internal.h) and keeps the file open while it
// maps any of it: it can share the memory on, with handles of its own.
#include "foo_runtime.h"
#include "internal.h"
#include "sanitizer.h"
#include "stream_internal.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace foo_runtime {
namespace {

constexpr uint32_t kMemoryMagic = 0x4d4f4f46;  // "FOOM"
constexpr uint32_t kEventMagic = 0x454f4f46;   // "FOOE"
constexpr size_t kEventSlots = 4096;
constexpr size_t kEventSlotBytes = 64;  // a cache line each: processes waiting on one event do not slow another
static_assert(sizeof(SharedEventCounters) <= kEventSlotBytes);

// What a handle holds.
struct Payload {
  uint32_t magic;
  int32_t device;        // memory: its device; events: -1
  int32_t device_count;  // the exporter's
  int32_t pid;           // the process and descriptor through which the file is opened
  int32_t fd;
  uint64_t token;        // of the process that made the file (in its name)
  uint64_t offset;       // memory: the allocation's offset in the file; events: the counters' slot
  uint64_t bytes;        // memory: the allocation's size
};
static_assert(sizeof(Payload) <= FOO_IPC_HANDLE_SIZE);

template <class Handle>
Handle encode(const Payload& payload) {
  Handle handle;
  std::memset(&handle, 0, sizeof(handle));
  std::memcpy(handle.reserved, &payload, sizeof(payload));
  return handle;
}

template <class Handle>
Payload decode(const Handle& handle) {
  Payload payload;
  std::memcpy(&payload, handle.reserved, sizeof(payload));
  return payload;
}

// The file of `device`'s memory, or with device -1 of the interprocess events, of the process with `token`.
std::string fileName(uint64_t token, int device) {
  char name[64];
  if (device < 0) {
    std::snprintf(name, sizeof(name), "foo-%016llx-events", static_cast<unsigned long long>(token));
  } else {
    std::snprintf(name, sizeof(name), "foo-%016llx-device-%d", static_cast<unsigned long long>(token), device);
  }
  return name;
}

// True when the process the handle names is alive and still holds the file under that descriptor (neither
// its pid nor the descriptor's number reused).
bool peerHoldsFile(const Payload& payload, const std::string& name) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", payload.pid, payload.fd);
  char target[256];
  const ssize_t length = readlink(path, target, sizeof(target) - 1);
  return length > 0 && std::string(target, static_cast<size_t>(length)) == "/memfd:" + name + " (deleted)";
}

// Opens another process's file through its descriptor: -1 when that process no longer holds it, or the file is
// smaller than `bytes`.
int openPeerFile(const Payload& payload, const std::string& name, size_t bytes) {
  if (!peerHoldsFile(payload, name)) return -1;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", payload.pid, payload.fd);
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat info {};
  if (fd >= 0 && (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < bytes || !peerHoldsFile(payload, name))) {
    close(fd);  // the descriptor changed files between the two looks, or the file is not as large
    return -1;
  }
  return fd;
}

// Memory other processes shared that this process maps.
struct Import {
  int device;
  std::string file;
  uint64_t token;
  size_t file_offset;
  size_t bytes;
  int opens;
};

struct Imports {
  std::mutex mutex;
  std::map<std::string, std::pair<int, int>> files;  // name -> its descriptor, and how many imports map it
  std::map<const char*, Import> by_address;          // device address -> what is mapped there
  std::map<std::pair<std::string, size_t>, const char*> by_part;  // (file, offset) -> device address
};

Imports& imports() {
  static auto* const state = new Imports();  // never destroyed: memory may be closed while the process exits
  return *state;
}

// This process's interprocess events' counters, and the other processes' it opened.
struct EventFiles {
  std::mutex mutex;
  int fd = -1;
  char* slots = nullptr;
  std::vector<size_t> free_slots;
  size_t fresh = 0;  // slots from here on were never handed out
  std::map<std::string, char*> peers;
};

EventFiles& eventFiles() {
  static auto* const state = new EventFiles();
  return *state;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

}  // namespace

uint64_t processToken() {
  static const uint64_t token = [] {
    std::random_device random;
    const uint64_t now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<uint64_t>(random()) << 32 ^ random()) ^ now ^ static_cast<uint64_t>(getpid());
  }();
  return token;
}

std::string deviceFileName(int device) { return fileName(processToken(), device); }

}  // namespace foo_runtime

using namespace foo_runtime;

// Completion and waits of interprocess events: the counters are atomics in shared memory, the wait a futex on
// it (not private to the process). A waiter announces itself before it reads the count it sleeps on, and a
// completer publishes the generation before it looks for waiters: one of them sees the other.
void completeShared(SharedEventCounters& counters, uint64_t generation) {
  uint64_t seen = counters.completed.load();
  while (seen < generation && !counters.completed.compare_exchange_weak(seen, generation)) {
  }
  counters.wakes.fetch_add(1);
  if (counters.waiters.load() != 0) futex(&counters.wakes, FUTEX_WAKE, INT_MAX);
}

void waitForShared(SharedEventCounters& counters, uint64_t generation) {
  while (counters.completed.load() < generation) {
    counters.waiters.fetch_add(1);
    const uint32_t wakes = counters.wakes.load();
    if (counters.completed.load() < generation) futex(&counters.wakes, FUTEX_WAIT, wakes);
    counters.waiters.fetch_sub(1);
  }
}

void releaseSharedEventCounters(SharedEventCounters* counters) {
  EventFiles& files = eventFiles();
  std::lock_guard<std::mutex> lock(files.mutex);
  // Its counters keep counting: a process that still waits on an old record sees it completed.
  files.free_slots.push_back(static_cast<size_t>(reinterpret_cast<char*>(counters) - files.slots) / kEventSlotBytes);
}

extern "C" {

fooError_t fooIpcGetMemHandle(fooIpcMemHandle_t* handle, void* dev_ptr) {
  void* base = nullptr;
  size_t bytes = 0;
  if (handle == nullptr || fooMemGetAddressRange(&base, &bytes, dev_ptr) != fooSuccess) return fooErrorInvalidValue;
  const int device = fooPointerGetDevice(base);
  DeviceMemory& mem = deviceMemory(device);
  const char* address = static_cast<const char*>(base);
  Payload payload{kMemoryMagic, device, deviceCount(), static_cast<int32_t>(getpid()), mem.fd, processToken(),
                  static_cast<uint64_t>(address - mem.device_base), bytes};
  if (address >= mem.device_base + mem.size) {  // memory this process opened: shared on through its own descriptor
    Imports& state = imports();
    std::lock_guard<std::mutex> lock(state.mutex);
    const Import& import = state.by_address.at(address);
    payload.fd = state.files.at(import.file).first;
    payload.token = import.token;
    payload.offset = import.file_offset;
  }
  *handle = encode<fooIpcMemHandle_t>(payload);
  return fooSuccess;
}

fooError_t fooIpcOpenMemHandle(void** dev_ptr, fooIpcMemHandle_t handle) {
  const Payload payload = decode(handle);
  if (dev_ptr == nullptr || payload.magic != kMemoryMagic || payload.bytes == 0 || payload.offset % kPage != 0) {
    return fooErrorInvalidValue;
  }
  if (payload.device_count != deviceCount() || !validDevice(payload.device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  DeviceMemory& mem = deviceMemory(payload.device);
  if (payload.token == processToken()) {  // this process's own memory, come back
    *dev_ptr = mem.device_base + payload.offset;
    return fooSuccess;
  }
  const std::string name = fileName(payload.token, payload.device);
  Imports& state = imports();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (auto opened = state.by_part.find({name, payload.offset}); opened != state.by_part.end()) {
    ++state.by_address.at(opened->second).opens;
    *dev_ptr = const_cast<char*>(opened->second);
    return fooSuccess;
  }
  // Opened once, an allocation stays reachable; a new one only while its exporter lives, as on CUDA, where the
  // exporter's exit frees its memory.
  auto file = state.files.find(name);
  if (file != state.files.end() && !peerHoldsFile(payload, name)) return fooErrorInvalidIpcHandle;
  if (file == state.files.end()) {
    const int fd = openPeerFile(payload, name, payload.offset + payload.bytes);
    if (fd < 0) return fooErrorInvalidIpcHandle;
    file = state.files.emplace(name, std::make_pair(fd, 0)).first;
  }
  size_t window_offset = 0;
  bool mapped = false;
  {
    std::lock_guard<std::mutex> memory_lock(mem.mutex);
    if (mem.imports.allocate(payload.bytes, &window_offset)) {
      mapped = mmap(mem.kernel_base + mem.size + window_offset, payload.bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_FIXED, file->second.first, static_cast<off_t>(payload.offset)) != MAP_FAILED;
      if (!mapped) mem.imports.release(window_offset);
    }
  }
  if (!mapped) {
    if (file->second.second == 0) {
      close(file->second.first);
      state.files.erase(file);
    }
    return fooErrorMemoryAllocation;
  }
  ++file->second.second;
  const char* address = mem.device_base + mem.size + window_offset;
  state.by_address.emplace(address, Import{payload.device, name, payload.token, payload.offset, payload.bytes, 1});
  state.by_part.emplace(std::make_pair(name, static_cast<size_t>(payload.offset)), address);
  sanitizer::forget(address, payload.bytes);
  *dev_ptr = const_cast<char*>(address);
  return fooSuccess;
}

fooError_t fooIpcCloseMemHandle(void* dev_ptr) {
  if (fooIsInBadFork()) return fooSuccess;  // the mappings are the parent's
  const int device = fooPointerGetDevice(dev_ptr);
  if (device < 0) return fooErrorInvalidValue;
  DeviceMemory& mem = deviceMemory(device);
  const char* address = static_cast<const char*>(dev_ptr);
  if (address < mem.device_base + mem.size) return fooSuccess;  // this process's own memory, opened
  Imports& state = imports();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.by_address.find(address);
  if (found == state.by_address.end()) return fooErrorInvalidValue;
  Import& import = found->second;
  if (--import.opens > 0) return fooSuccess;
  const size_t window_offset = static_cast<size_t>(address - mem.device_base) - mem.size;
  {
    std::lock_guard<std::mutex> memory_lock(mem.mutex);
    // Zeros again, read-only, as the rest of the window.
    mmap(mem.kernel_base + mem.size + window_offset, import.bytes, PROT_READ,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    mem.imports.release(window_offset);
  }
  auto file = state.files.find(import.file);
  if (--file->second.second == 0) {
    close(file->second.first);
    state.files.erase(file);
  }
  state.by_part.erase({import.file, import.file_offset});
  state.by_address.erase(found);
  return fooSuccess;
}

fooError_t fooEventCreateInterprocess(fooEvent_t* event) {
  if (event == nullptr) return fooErrorInvalidValue;
  EventFiles& files = eventFiles();
  std::lock_guard<std::mutex> lock(files.mutex);
  if (files.slots == nullptr) {
    const int fd = memfd_create(fileName(processToken(), -1).c_str(), MFD_CLOEXEC);
    if (fd < 0) return fooErrorMemoryAllocation;
    void* slots = ftruncate(fd, kEventSlots * kEventSlotBytes) == 0
                      ? mmap(nullptr, kEventSlots * kEventSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (slots == MAP_FAILED) {
      close(fd);
      return fooErrorMemoryAllocation;
    }
    files.fd = fd;
    files.slots = static_cast<char*>(slots);
  }
  size_t slot = files.fresh;
  if (!files.free_slots.empty()) {
    slot = files.free_slots.back();
    files.free_slots.pop_back();
  } else if (files.fresh < kEventSlots) {
    ++files.fresh;
  } else {
    return fooErrorMemoryAllocation;  // as CUDA, a process has a bounded number of interprocess events
  }
  *event = new fooEvent();
  (*event)->state->shared = reinterpret_cast<SharedEventCounters*>(files.slots + slot * kEventSlotBytes);
  (*event)->state->owns_shared = true;
  return fooSuccess;
}

fooError_t fooIpcGetEventHandle(fooIpcEventHandle_t* handle, fooEvent_t event) {
  if (handle == nullptr || event == nullptr || !event->state->owns_shared) return fooErrorInvalidValue;
  EventFiles& files = eventFiles();
  const size_t slot = static_cast<size_t>(reinterpret_cast<char*>(event->state->shared) - files.slots) / kEventSlotBytes;
  *handle = encode<fooIpcEventHandle_t>(
      Payload{kEventMagic, -1, deviceCount(), static_cast<int32_t>(getpid()), files.fd, processToken(), slot, 0});
  return fooSuccess;
}

fooError_t fooIpcOpenEventHandle(fooEvent_t* event, fooIpcEventHandle_t handle) {
  const Payload payload = decode(handle);
  if (event == nullptr || payload.magic != kEventMagic || payload.offset >= kEventSlots) return fooErrorInvalidValue;
  EventFiles& files = eventFiles();
  char* slots = nullptr;
  {
    std::lock_guard<std::mutex> lock(files.mutex);
    if (payload.token == processToken()) {
      slots = files.slots;
    } else {
      const std::string name = fileName(payload.token, -1);
      auto peer = files.peers.find(name);
      if (peer == files.peers.end()) {
        const int fd = openPeerFile(payload, name, kEventSlots * kEventSlotBytes);
        if (fd < 0) return fooErrorInvalidIpcHandle;
        void* mapped = mmap(nullptr, kEventSlots * kEventSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);  // the mapping keeps the counters: kept as long as the process, as its opened events are few
        if (mapped == MAP_FAILED) return fooErrorMemoryAllocation;
        peer = files.peers.emplace(name, static_cast<char*>(mapped)).first;
      }
      slots = peer->second;
    }
  }
  if (slots == nullptr) return fooErrorInvalidIpcHandle;
  *event = new fooEvent();
  (*event)->state->shared = reinterpret_cast<SharedEventCounters*>(slots + payload.offset * kEventSlotBytes);
  return fooSuccess;
}

}  // extern "C"
