// Streams and kernel launches: the stream pools and priorities, each stream's lock-free queue and worker
// thread, launches, synchronous runs, launch counts, queries, stream and device synchronization, and
// FOO_LAUNCH_BLOCKING. Every kernel and copy enters the device through fooLaunchKernel. Events are in
// event.cpp, capture and graphs in graph.cpp; what those share with streams is in stream_internal.h.
//
// Each stream is an ordered queue executed by its own worker thread (started on the stream's first
// launch), so the host returns from a launch before the work is done, as with a GPU. Events are markers
// in a stream's queue: they complete when the worker reaches them. FOO_LAUNCH_BLOCKING=1 runs every
// launch inline on the calling thread instead, as CUDA_LAUNCH_BLOCKING does.
#include "foo_runtime.h"
#include "internal.h"
#include "stream_internal.h"
#include "thread_cache.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace foo_runtime {
namespace {

// Like CUDA's stream pools: stream 0 is the default stream, then a fixed set of streams per priority,
// handed out round-robin. Lower numbers are higher priority, as on CUDA.
constexpr int kStreamsPerPriority = 32;
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -1;
constexpr int kStreamsPerDevice = 1 + kStreamsPerPriority * (kLeastPriority - kGreatestPriority + 1);

bool launchBlocking() {
  static const bool blocking = [] {
    const char* env = std::getenv("FOO_LAUNCH_BLOCKING");
    return env != nullptr && env[0] == '1';
  }();
  return blocking;
}

// How many streams capture (of any device): while none does, nobody needs a stream's lock to know.
std::atomic<int> g_capturing_streams{0};

// Runs a task once, then gives its argument back (FOO_LAUNCH_BLOCKING's inline runs).
void runTask(const Task& task) {
  runTraced(task.traced, task.fn, task.arg);
  if (task.release != nullptr) task.release(task.arg);
}

// A queued task, in a node of the stream's queue. Nodes come from a per-thread cache: a host thread
// keeps the nodes of the tasks it gives back, and takes them again for its next launches.
struct alignas(64) Node {  // a line of its own: its neighbours may be written meanwhile
  std::atomic<Node*> next{nullptr};
  Task task;
};

class NodeCache {
 public:
  Node* take(const Task& task) {
    Node* node = free_;
    if (node == nullptr) return new Node{{nullptr}, task};
    free_ = node->next.load(std::memory_order_relaxed);
    --count_;
    // The next launch's node was read by a stream's worker: ask for its line a launch ahead.
    if (free_ != nullptr) prepareForWriting(free_);
    node->next.store(nullptr, std::memory_order_relaxed);
    node->task = task;
    return node;
  }
  void give(Node* node) {
    if (count_ >= kMaxNodes) {
      delete node;
      return;
    }
    node->next.store(free_, std::memory_order_relaxed);
    free_ = node;
    ++count_;
  }
  ~NodeCache() {
    while (free_ != nullptr) {
      Node* next = free_->next.load(std::memory_order_relaxed);
      delete free_;
      free_ = next;
    }
  }

 private:
  static constexpr size_t kMaxNodes = 4096;
  Node* free_ = nullptr;
  size_t count_ = 0;
};

using ThreadNodes = ThreadCache<NodeCache>;  // a host thread's nodes (thread_cache.h)
thread_local ThreadNodes t_nodes;
thread_local bool t_stream_worker = false;  // workers launch nothing: they keep no nodes
thread_local int t_giving_back = 0;         // inside releases this thread is giving back
thread_local Stream* t_holding = nullptr;   // the stream whose synchronous run this thread is in

Node* newNode(const Task& task) { return t_nodes.cache.take(task); }

void recycleNode(Node* node) {
  if (ThreadNodes::alive && !t_stream_worker) {
    t_nodes.cache.give(node);
  } else {
    delete node;
  }
}

}  // namespace

// The host launches without locks: launches enter a multi-producer queue that only the stream's worker
// consumes (Vyukov's intrusive queue: `head_` is the node last consumed, producers swap `tail_`). The
// worker only reads the nodes and counts what it completed; host threads give back the arguments of
// completed tasks, walking the queue behind the worker, every kReleaseEvery launches and whenever they
// query or synchronize the stream: the host allocated them, and memory freed on the thread that
// allocated it stays in that thread's cache (a worker freeing it would contend with the host for the
// heap's lock), and the cache lines the worker writes are read once per batch, not once per launch.
// Once the stream idles, the worker gives back what is left itself. Any number of threads may give back
// at once: batches are taken in turn under `release_mutex_`. A synchronous run on the host holds the
// stream against other threads' launches (runSynchronous). `mutex_` serves the slow paths only:
// sleeping, waiting, captures and events' markers.
class Stream {
 public:
  Stream() : tail_(new Node) {
    head_ = tail_.load(std::memory_order_relaxed);
    released_node_ = head_;
  }

  // Queues the task, or records it when the stream is capturing (a task without a release function
  // cannot be recorded: it may free its argument as it runs).
  fooError_t launch(const Task& task) {
    if (g_capturing_streams.load(std::memory_order_acquire) != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capture_) return capture(task);
    }
    if (!worker_started_.load(std::memory_order_acquire)) startWorker();
    // Counted before held_ is read, as runSynchronous sets held_ before it reads the count: a launch it
    // does not wait for sees the stream held.
    const uint64_t launched = submitted_.fetch_add(1, std::memory_order_seq_cst) + 1;
    Node* node = newNode(task);
    Node* previous = tail_.exchange(node, std::memory_order_acq_rel);
    previous->next.store(node, std::memory_order_seq_cst);  // pairs with the worker's going to sleep
    if (worker_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lock(mutex_); }  // the worker is either waiting or sees the node
      work_ready_.notify_one();
    }
    // Event records pass: the caching allocator records them under its lock, which the synchronous run
    // holding the stream may take (they neither use nor free memory).
    if (held_.load(std::memory_order_seq_cst) && !task.marker) waitWhileHeld();
    // Not for event records: the caching allocator records them under its lock, which a release
    // (freeing a kernel's tensors) would take again.
    if (!task.marker && launched % kReleaseEvery == 0) giveBackCompleted();
    return fooSuccess;
  }

  // With FOO_LAUNCH_BLOCKING=1: runs the task now, unless the stream is capturing (then records it).
  fooError_t runInline(const Task& task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capture_) return capture(task);
    }
    runTask(task);
    return fooSuccess;
  }

  bool capturing() {
    if (g_capturing_streams.load(std::memory_order_acquire) == 0) return false;  // the common case, lock-free
    std::lock_guard<std::mutex> lock(mutex_);
    return capture_ != nullptr;
  }

  // The graph this stream captures into (its own capture, or one it joined), if any.
  std::shared_ptr<GraphNodes> captureGraph() {
    if (g_capturing_streams.load(std::memory_order_acquire) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    return capture_;
  }

  fooError_t beginCapture(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capture_) return fooErrorStreamCaptureUnsupported;
    capture_ = std::make_shared<GraphNodes>(device);
    joined_ = false;
    g_capturing_streams.fetch_add(1, std::memory_order_release);
    return fooSuccess;
  }

  // As a CUDA stream waiting on an event recorded in a capture: this stream's later launches join that
  // capture, in one order with the capturing stream's (the graph runs its launches in order).
  fooError_t joinCapture(const std::shared_ptr<GraphNodes>& graph) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capture_ == graph) return fooSuccess;
    if (capture_) return fooErrorStreamCaptureUnsupported;  // capturing another graph
    {
      std::lock_guard<std::mutex> capture_lock(graph->capture_mutex);
      if (!graph->capturing) return fooErrorInvalidValue;
      graph->joined.push_back(this);
    }
    capture_ = graph;
    joined_ = true;
    g_capturing_streams.fetch_add(1, std::memory_order_release);
    return fooSuccess;
  }

  // Ends the capture this stream began (not one it joined), and the joined streams' part in it.
  fooError_t endCapture(std::shared_ptr<GraphNodes>* graph) {
    std::vector<Stream*> joined;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!capture_ || joined_) return fooErrorInvalidValue;
      {
        std::lock_guard<std::mutex> capture_lock(capture_->capture_mutex);
        capture_->capturing = false;
        joined.swap(capture_->joined);
      }
      *graph = std::move(capture_);
      g_capturing_streams.fetch_sub(1, std::memory_order_release);
    }
    for (Stream* stream : joined) stream->leaveCapture();
    return fooSuccess;
  }

  // fooSuccess when all its work is done and given back, fooErrorNotReady while some is not, and
  // fooErrorStreamCaptureUnsupported while it captures.
  fooError_t query() {
    bool done = false;
    {
      // Under the lock an event's marker runs in: the stream is idle only once its events are complete.
      std::lock_guard<std::mutex> lock(mutex_);
      if (capture_) return fooErrorStreamCaptureUnsupported;
      done = completed_.load(std::memory_order_acquire) == submitted_.load(std::memory_order_acquire);
    }
    if (!done) {
      giveBackCompleted();
      return fooErrorNotReady;
    }
    waitForReleases();  // the worker may be giving back work it completed: done in moments
    return fooSuccess;
  }

  uint64_t launched() { return submitted_.load(std::memory_order_acquire); }

  // Waits for the work launched so far; refused while it captures. Without locks when nothing is
  // left to wait for (a device synchronization asks every stream of the device).
  fooError_t synchronize() {
    if (capturing()) return fooErrorStreamCaptureUnsupported;
    waitForCompleted(submitted_.load(std::memory_order_seq_cst));
    return fooSuccess;
  }

  // Runs fn(arg) on this thread once the work launched before has completed, holding the stream until
  // it returns: a launch from another host thread meanwhile returns only then. Otherwise that thread
  // could free memory its queued work still uses, which the stream-ordered allocator would hand to
  // this run (as the host reuses memory freed on a stream for the next work on it), and this run, not
  // ordered after that work, would write it while it runs. Refused while the stream captures.
  fooError_t runSynchronous(TracedLaunch* traced, fooKernelFn fn, void* arg) {
    std::unique_lock<std::mutex> hold;
    Stream* const outer = t_holding;
    if (outer != this) {  // a run inside this stream's synchronous run already holds it
      hold = std::unique_lock<std::mutex>(hold_mutex_);
      held_.store(true, std::memory_order_seq_cst);
      t_holding = this;
    }
    const fooError_t state = synchronize();
    if (state == fooSuccess) {
      if (traced != nullptr) traced->call_end_ns = activityClockNs();
      runTraced(traced, fn, arg);
    } else {
      delete traced;  // a capture began meanwhile: nothing runs
    }
    if (outer != this) {
      t_holding = outer;
      held_.store(false, std::memory_order_seq_cst);
      notifyWaiters();
    }
    return state;
  }

 private:
  // Waits until `target` launches have completed and what they held is given back.
  void waitForCompleted(uint64_t target) {
    if (completed_.load(std::memory_order_acquire) < target) {
      // Polls briefly before sleeping, as CUDA's host spins while a short wait is likely: a wake-up
      // costs more than the small kernels a host typically waits for.
      pollFor([&] { return completed_.load(std::memory_order_acquire) >= target; });
      std::unique_lock<std::mutex> lock(mutex_);
      waitUntil(lock, [&] { return completed_.load(std::memory_order_seq_cst) >= target; });
    }
    waitForReleases();
  }

  // A launch made while another thread's synchronous run holds the stream returns once it is done.
  void waitWhileHeld() {
    // Its own run; work a kernel causes on the worker; or a launch a release makes (the run may wait for
    // that release to end).
    if (t_holding == this || t_stream_worker || t_giving_back > 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    waitUntil(lock, [&] { return !held_.load(std::memory_order_seq_cst); });
  }

  void startWorker() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (worker_started_.load(std::memory_order_relaxed)) return;
    std::thread([this] { work(); }).detach();  // lives as long as the process
    worker_started_.store(true, std::memory_order_release);
  }

  void work() {
    t_stream_worker = true;
    for (;;) {
      Node* next = head_->next.load(std::memory_order_acquire);
      if (next == nullptr) {
        // A host launching small kernels queues the next one within microseconds: polling briefly
        // before sleeping spares each launch a wake-up (as CUDA's driver spins while it waits).
        pollFor([&] { return head_->next.load(std::memory_order_acquire) != nullptr; });
        if (head_->next.load(std::memory_order_acquire) != nullptr) continue;
        if (released_.load(std::memory_order_acquire) < completed_.load(std::memory_order_relaxed)) {
          // Idle: gives back what no host thread came for, so nothing stays held while the stream sleeps.
          giveBackCompleted();
          continue;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        worker_sleeping_.store(true, std::memory_order_seq_cst);
        work_ready_.wait(lock, [&] { return head_->next.load(std::memory_order_seq_cst) != nullptr; });
        worker_sleeping_.store(false, std::memory_order_relaxed);
        continue;
      }
      const Task task = next->task;
      head_ = next;
      if (task.marker) {
        // Counted done after it ran, and both under the lock query() reads the count under: whoever
        // sees the stream past the marker sees its event complete, and whoever sees the event complete
        // and then queries the stream sees it past the marker.
        std::lock_guard<std::mutex> lock(mutex_);
        task.fn(task.arg);
        completed_.fetch_add(1, std::memory_order_seq_cst);
      } else {
        runTraced(task.traced, task.fn, task.arg);
        completed_.fetch_add(1, std::memory_order_seq_cst);
      }
      notifyWaiters();
    }
  }

  // Returns once what the completed work held is given back: by this thread, or by others (host threads
  // or the worker) that took part of it to give back and are still doing so. Inside a release (which
  // might synchronize), only what this thread finds: it would wait for itself.
  void waitForReleases() {
    const uint64_t target = completed_.load(std::memory_order_acquire);
    giveBackCompleted();
    if (t_giving_back > 0 || given_back_.load(std::memory_order_acquire) >= target) return;
    std::unique_lock<std::mutex> lock(mutex_);
    waitUntil(lock, [&] { return given_back_.load(std::memory_order_seq_cst) >= target; });
  }

  // Gives back the arguments of the completed tasks not given back yet, on this thread, in batches:
  // a release may free tensors, which may launch (an event record), so none runs under a lock. Several
  // threads may give back at once (host threads, the worker): each batch is taken whole under
  // release_mutex_, the tasks to release read there too, since the node holding the last one is the
  // first node the next batch recycles, on another thread, as soon as the lock is let go.
  void giveBackCompleted() {
    if (released_.load(std::memory_order_acquire) == completed_.load(std::memory_order_acquire)) return;
    for (;;) {
      constexpr size_t kBatch = 32;
      Node* passed[kBatch];  // nodes the worker has moved past, each followed by a node whose task ran
      struct Release {
        fooReleaseFn fn;
        void* arg;
      } releases[kBatch];
      size_t count = 0;
      uint64_t first = 0;
      {
        std::lock_guard<std::mutex> lock(release_mutex_);
        const uint64_t completed = completed_.load(std::memory_order_acquire);
        uint64_t released = released_.load(std::memory_order_relaxed);
        if (released == completed) return;
        first = released;
        for (; released < completed && count < kBatch; ++released) {
          Node* next = released_node_->next.load(std::memory_order_acquire);  // linked: it was consumed
          passed[count] = released_node_;
          releases[count++] = {next->task.release, next->task.arg};
          released_node_ = next;
          // The worker read what is written next (the node, and an argument its release frees): asked for
          // now, the lines it holds are given up for all of the batch at once, not one write at a time.
          prepareForWriting(passed[count - 1]);
          prepareForWriting(next->task.arg);
        }
        releasing_from_.push_back(first);
        released_.store(released, std::memory_order_release);
      }
      ++t_giving_back;
      for (size_t i = 0; i < count; ++i) {
        if (releases[i].fn != nullptr) releases[i].fn(releases[i].arg);
      }
      --t_giving_back;
      for (size_t i = 0; i < count; ++i) recycleNode(passed[i]);
      {
        // Batches end in any order: what is given back is everything before the oldest batch still running.
        std::lock_guard<std::mutex> lock(release_mutex_);
        releasing_from_.erase(std::find(releasing_from_.begin(), releasing_from_.end(), first));
        const uint64_t oldest = releasing_from_.empty()
                                    ? released_.load(std::memory_order_relaxed)
                                    : *std::min_element(releasing_from_.begin(), releasing_from_.end());
        given_back_.store(oldest, std::memory_order_seq_cst);
      }
      notifyWaiters();
    }
  }

  // Waits under `lock` (on mutex_) until `ready()`, which the worker changes before notifyWaiters().
  template <class Ready>
  void waitUntil(std::unique_lock<std::mutex>& lock, Ready&& ready) {
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    work_done_.wait(lock, ready);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

  void notifyWaiters() {
    if (waiters_.load(std::memory_order_seq_cst) == 0) return;
    { std::lock_guard<std::mutex> lock(mutex_); }  // a waiter is either waiting or sees the change
    work_done_.notify_all();
  }

  // Waits up to kPollBeforeSleeping for `ready()`: spinning for the first microseconds (a small kernel's
  // time: a yield alone costs a system call, about as long), then yielding the core meanwhile.
  template <class Ready>
  static void pollFor(Ready&& ready) {
    const auto start = std::chrono::steady_clock::now();
    for (auto now = start; !ready(); now = std::chrono::steady_clock::now()) {
      if (now - start >= kPollBeforeSleeping) return;
      if (now - start < kSpinBeforeYielding) {
        for (int i = 0; i < 16 && !ready(); ++i) spinPause();
      } else {
        std::this_thread::yield();
      }
    }
  }

  // Under the lock, while capturing.
  fooError_t capture(const Task& task) {
    if (task.marker || task.release == nullptr) return fooErrorStreamCaptureUnsupported;
    delete task.traced;  // nothing runs now: nothing to trace
    std::lock_guard<std::mutex> capture_lock(capture_->capture_mutex);
    capture_->nodes.push_back({task.fn, task.arg, task.release, task.name != nullptr ? task.name : "kernel"});
    return fooSuccess;
  }

  void leaveCapture() {
    std::lock_guard<std::mutex> lock(mutex_);
    capture_.reset();
    joined_ = false;
    g_capturing_streams.fetch_sub(1, std::memory_order_release);
  }

  static constexpr std::chrono::microseconds kPollBeforeSleeping{50};
  static constexpr std::chrono::microseconds kSpinBeforeYielding{5};
  static constexpr uint64_t kReleaseEvery = 16;

  // Each on its own cache line: the host writes the first two, the worker the next two.
  alignas(64) std::atomic<Node*> tail_;
  alignas(64) std::atomic<uint64_t> submitted_{0};
  alignas(64) Node* head_;
  alignas(64) std::atomic<uint64_t> completed_{0};
  alignas(64) std::mutex release_mutex_;
  // Under release_mutex_: the last node whose task was taken to give back (or the first stub), how many
  // were taken, and the first task of each batch still being given back.
  Node* released_node_;
  std::atomic<uint64_t> released_{0};
  std::vector<uint64_t> releasing_from_;
  std::atomic<uint64_t> given_back_{0};  // the tasks before it are all given back
  alignas(64) std::atomic<bool> held_{false};  // a synchronous run holds the stream (runSynchronous)
  std::mutex hold_mutex_;                        // one synchronous run at a time
  alignas(64) std::atomic<bool> worker_sleeping_{false};
  std::atomic<int> waiters_{0};
  std::atomic<bool> worker_started_{false};  // not a once_flag: call_once costs thread-local bookkeeping
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::shared_ptr<GraphNodes> capture_;  // the graph being captured, if any
  bool joined_ = false;                  // capture_ is another stream's capture, which this one joined
};

namespace {

struct DeviceStreams {
  std::array<Stream, kStreamsPerDevice> streams;
  std::array<int, kLeastPriority - kGreatestPriority + 1> next_in_pool{};
  std::mutex pool_mutex;
};

// Never destroyed: detached workers may still be waiting on their streams at exit.
DeviceStreams* const g_devices = new DeviceStreams[FOO_MAX_DEVICES];

Stream& streamOf(int device, fooStream_t stream) { return g_devices[device].streams[stream]; }

bool deviceCapturing(int device) {
  for (Stream& stream : g_devices[device].streams)
    if (stream.capturing()) return true;
  return false;
}

}  // namespace

bool validStream(int device, fooStream_t stream) {
  return validDevice(device) && stream >= 0 && stream < kStreamsPerDevice;
}

fooError_t launchTask(int device, fooStream_t stream, const Task& task) {
  if (task.traced != nullptr) task.traced->call_end_ns = activityClockNs();
  Stream& queue = streamOf(device, stream);
  return launchBlocking() ? queue.runInline(task) : queue.launch(task);
}

bool streamCapturing(int device, fooStream_t stream) { return streamOf(device, stream).capturing(); }

std::shared_ptr<GraphNodes> streamCaptureGraph(int device, fooStream_t stream) {
  return streamOf(device, stream).captureGraph();
}

fooError_t streamBeginCapture(int device, fooStream_t stream) { return streamOf(device, stream).beginCapture(device); }

fooError_t streamJoinCapture(int device, fooStream_t stream, const std::shared_ptr<GraphNodes>& graph) {
  return streamOf(device, stream).joinCapture(graph);
}

fooError_t streamEndCapture(int device, fooStream_t stream, std::shared_ptr<GraphNodes>* graph) {
  return streamOf(device, stream).endCapture(graph);
}

}  // namespace foo_runtime

using namespace foo_runtime;

extern "C" {

fooError_t fooStreamCreate(int device, fooStream_t* stream, int priority) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (priority > kLeastPriority) priority = kLeastPriority;
  if (priority < kGreatestPriority) priority = kGreatestPriority;
  DeviceStreams& d = g_devices[device];
  const int level = kLeastPriority - priority;  // 0 for the least priority
  std::lock_guard<std::mutex> lock(d.pool_mutex);
  *stream = 1 + level * kStreamsPerPriority + d.next_in_pool[level];
  d.next_in_pool[level] = (d.next_in_pool[level] + 1) % kStreamsPerPriority;
  return fooSuccess;
}

fooError_t fooStreamGetPriority(int device, fooStream_t stream, int* priority) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  *priority = stream == 0 ? 0 : kLeastPriority - static_cast<int>((stream - 1) / kStreamsPerPriority);
  return fooSuccess;
}

int fooLaunchBlocking(void) { return launchBlocking() ? 1 : 0; }

fooError_t fooLaunchKernel(int device, fooStream_t stream, fooKernelFn fn, void* arg) {
  return fooLaunchKernelEx(device, stream, fn, arg, nullptr, fooActivityKindKernel, nullptr);
}

fooError_t fooLaunchKernelEx(int device, fooStream_t stream, fooKernelFn fn, void* arg, fooReleaseFn release,
                             fooActivityKind kind, const char* name) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (!validStream(device, stream) || kind == fooActivityKindRuntime) return fooErrorInvalidValue;
  TracedLaunch* traced = traceLaunch(device, stream, kind, name, "fooLaunchKernel");
  const fooError_t error = launchTask(device, stream, Task{fn, arg, false, traced, release, name});
  if (error != fooSuccess) delete traced;  // a capture refused it: nothing was launched
  return error;
}

fooError_t fooStreamRunSynchronous(int device, fooStream_t stream, fooKernelFn fn, void* arg, fooActivityKind kind,
                                   const char* name) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (!validStream(device, stream) || kind == fooActivityKindRuntime) return fooErrorInvalidValue;
  Stream& queue = streamOf(device, stream);
  if (queue.capturing()) return fooErrorStreamCaptureUnsupported;
  const fooError_t error =
      queue.runSynchronous(traceLaunch(device, stream, kind, name, "fooStreamRunSynchronous"), fn, arg);
  if (error == fooSuccess) sanitizer::hostWaitedForStream(device, stream);
  return error;
}

fooError_t fooStreamGetLaunchCount(int device, fooStream_t stream, uint64_t* count) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  *count = streamOf(device, stream).launched();
  return fooSuccess;
}

fooError_t fooStreamQuery(int device, fooStream_t stream) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  const fooError_t state = streamOf(device, stream).query();
  if (state == fooSuccess) sanitizer::hostWaitedForStream(device, stream);
  return state;
}

fooError_t fooStreamSynchronize(int device, fooStream_t stream) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  const fooError_t error = streamOf(device, stream).synchronize();
  if (error == fooSuccess) sanitizer::hostWaitedForStream(device, stream);
  return error;
}

fooError_t fooDeviceSynchronize(int device) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (deviceCapturing(device)) return fooErrorStreamCaptureUnsupported;
  for (Stream& stream : g_devices[device].streams) {
    if (const fooError_t error = stream.synchronize(); error != fooSuccess) return error;  // a capture began meanwhile
  }
  sanitizer::hostWaitedForDevice(device);
  return fooSuccess;
}

}  // extern "C"
