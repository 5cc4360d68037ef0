// Streams, kernel launches, events and graphs. Every kernel and copy enters the device through fooLaunchKernel.
//
// Each stream is an ordered queue executed by its own worker thread (started on the stream's first
// launch), so the host returns from a launch before the work is done, as with a GPU. Events are markers
// in a stream's queue: they complete when the worker reaches them. FOO_LAUNCH_BLOCKING=1 runs every
// launch inline on the calling thread instead, as CUDA_LAUNCH_BLOCKING does.
#include "foo_runtime.h"
#include "internal.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
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

struct Task {
  fooKernelFn fn;
  void* arg;
  // An event's marker runs under the stream's lock, as the stream counts it done: whoever sees the
  // event complete sees the stream past it, and whoever sees the stream idle sees the event complete.
  bool marker = false;
  TracedLaunch* traced = nullptr;  // when activity tracing follows it
  fooReleaseFn release = nullptr;  // called after fn ran (a task that may be captured has one)
  const char* name = nullptr;      // what a capture calls it
};

// Runs a task once, then gives its argument back (FOO_LAUNCH_BLOCKING's inline runs).
void runTask(const Task& task) {
  runTraced(task.traced, task.fn, task.arg);
  if (task.release != nullptr) task.release(task.arg);
}

class Stream;

// The launches a capture recorded; releases their arguments when the last holder (the graph handle, or a
// queued launch of it) lets go.
struct GraphNodes {
  struct Node {
    fooKernelFn fn;
    void* arg;
    fooReleaseFn release;
    std::string name;
  };
  explicit GraphNodes(int device_index) : device(device_index), capture_id(g_next_capture_id.fetch_add(1) + 1) {}
  static inline std::atomic<unsigned long long> g_next_capture_id{0};
  const int device;
  const unsigned long long capture_id;  // the capture that records it (never 0)
  // While capturing: the streams that joined the capture by waiting on an event recorded in it, and the
  // lock their launches append under (each stream's own lock orders only its own launches).
  std::mutex capture_mutex;
  std::vector<Stream*> joined;
  bool capturing = true;
  std::vector<Node> nodes;
  void run() const {
    for (const Node& node : nodes) node.fn(node.arg);
  }
  ~GraphNodes() {
    for (const Node& node : nodes) node.release(node.arg);
  }
};

// Asks for the cache line at `address` ahead of a write: a line another core (a stream's worker) holds
// must first be given up, which an early request overlaps with other work (PREFETCHW, a no-op on x86
// processors without it).
inline void prepareForWriting(const void* address) {
#if defined(__x86_64__)
  if (address != nullptr) asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address)));
#else
  (void)address;
#endif
}

// Tells the processor this thread spins (it then yields resources to its sibling hardware thread).
inline void spinPause() {
#if defined(__x86_64__)
  asm volatile("pause");
#else
  std::this_thread::yield();
#endif
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

struct ThreadNodes {
  NodeCache cache;
  ThreadNodes() { alive = true; }
  ~ThreadNodes() { alive = false; }
  static thread_local bool alive;  // trivially destructible: readable while the thread exits
};
thread_local bool ThreadNodes::alive = false;
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

struct DeviceStreams {
  std::array<Stream, kStreamsPerDevice> streams;
  std::array<int, kLeastPriority - kGreatestPriority + 1> next_in_pool{};
  std::mutex pool_mutex;
};

// Never destroyed: detached workers may still be waiting on their streams at exit.
DeviceStreams* const g_devices = new DeviceStreams[FOO_MAX_DEVICES];

bool validStream(int device, fooStream_t stream) {
  return validDevice(device) && stream >= 0 && stream < kStreamsPerDevice;
}

Stream& streamOf(int device, fooStream_t stream) { return g_devices[device].streams[stream]; }

fooError_t launchTask(int device, fooStream_t stream, const Task& task) {
  if (task.traced != nullptr) task.traced->call_end_ns = activityClockNs();
  Stream& queue = streamOf(device, stream);
  return launchBlocking() ? queue.runInline(task) : queue.launch(task);
}

// A function to run on a worker; deleted after it ran.
template <class F>
fooError_t launchClosure(int device, fooStream_t stream, F&& f, bool marker = false, TracedLaunch* traced = nullptr) {
  using Closure = std::decay_t<F>;
  auto* closure = new Closure(std::forward<F>(f));
  Task task{[](void* arg) { (*static_cast<Closure*>(arg))(); }, closure, marker, traced,
            [](void* arg) { delete static_cast<Closure*>(arg); }};
  const fooError_t error = launchTask(device, stream, task);
  if (error != fooSuccess) {
    delete closure;
    delete traced;
  }
  return error;
}

bool deviceCapturing(int device) {
  for (Stream& stream : g_devices[device].streams)
    if (stream.capturing()) return true;
  return false;
}

}  // namespace
}  // namespace foo_runtime

// Completion is tracked by generation: each record asks for the next one, and the marker the record
// queues completes it.
struct EventState {
  std::mutex mutex;
  std::condition_variable completed_cv;
  uint64_t recorded = 0;
  uint64_t completed = 0;
  // Recorded last into a capture: a stream that waits on it joins the capture (see fooStreamWaitEvent).
  std::weak_ptr<foo_runtime::GraphNodes> captured_in;
  bool enable_timing = false;
  std::chrono::steady_clock::time_point time;

  void complete(uint64_t generation) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (generation > completed) {
        completed = generation;
        time = std::chrono::steady_clock::now();
      }
    }
    completed_cv.notify_all();
  }
  void waitFor(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mutex);
    completed_cv.wait(lock, [&] { return completed >= generation; });
  }
};

struct fooGraph {
  std::shared_ptr<foo_runtime::GraphNodes> nodes;
  // Its launches, in the order the host made them: each runs after the one before, on whichever stream
  // (as CUDA orders the launches of one executable graph).
  std::shared_ptr<EventState> launches = std::make_shared<EventState>();
};

// Shared with the markers and waits still queued, so destroying a recorded event is safe (as on CUDA).
struct fooEvent {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

using namespace foo_runtime;

namespace {

// The capture `state` was recorded into last, while that capture lasts; the caller holds state->mutex.
std::shared_ptr<GraphNodes> openCaptureOf(EventState& state) {
  std::shared_ptr<GraphNodes> graph = state.captured_in.lock();
  if (graph == nullptr) return nullptr;
  std::lock_guard<std::mutex> capture_lock(graph->capture_mutex);
  return graph->capturing ? graph : nullptr;
}

}  // namespace

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
  return queue.runSynchronous(traceLaunch(device, stream, kind, name, "fooStreamRunSynchronous"), fn, arg);
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
  return streamOf(device, stream).query();
}

fooError_t fooStreamSynchronize(int device, fooStream_t stream) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  return streamOf(device, stream).synchronize();
}

fooError_t fooDeviceSynchronize(int device) {
  if (!validDevice(device)) return fooErrorInvalidDevice;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  if (deviceCapturing(device)) return fooErrorStreamCaptureUnsupported;
  for (Stream& stream : g_devices[device].streams) {
    if (const fooError_t error = stream.synchronize(); error != fooSuccess) return error;  // a capture began meanwhile
  }
  return fooSuccess;
}

fooError_t fooEventCreate(fooEvent_t* event, int enable_timing) {
  *event = new fooEvent();
  (*event)->state->enable_timing = enable_timing != 0;
  return fooSuccess;
}

fooError_t fooEventDestroy(fooEvent_t event) {
  delete event;
  return fooSuccess;
}

fooError_t fooEventRecord(fooEvent_t event, int device, fooStream_t stream) {
  if (event == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  std::shared_ptr<EventState> state = event->state;
  if (std::shared_ptr<GraphNodes> graph = streamOf(device, stream).captureGraph()) {
    // A record in a capture marks a point of the graph, which nothing on the host can wait for; the
    // graph runs its launches in order, so it needs no marker either.
    std::lock_guard<std::mutex> lock(state->mutex);
    state->captured_in = graph;
    return fooSuccess;
  }
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->captured_in.reset();
    generation = ++state->recorded;
  }
  return launchClosure(device, stream, [state, generation] { state->complete(generation); }, /*marker=*/true);
}

fooError_t fooEventQuery(fooEvent_t event) {
  if (event == nullptr) return fooErrorInvalidValue;
  std::lock_guard<std::mutex> lock(event->state->mutex);
  if (openCaptureOf(*event->state) != nullptr) return fooErrorStreamCaptureUnsupported;
  return event->state->completed >= event->state->recorded ? fooSuccess : fooErrorNotReady;
}

fooError_t fooEventSynchronize(fooEvent_t event) {
  if (event == nullptr) return fooErrorInvalidValue;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(event->state->mutex);
    if (openCaptureOf(*event->state) != nullptr) return fooErrorStreamCaptureUnsupported;
    generation = event->state->recorded;
  }
  event->state->waitFor(generation);
  return fooSuccess;
}

fooError_t fooStreamWaitEvent(int device, fooStream_t stream, fooEvent_t event) {
  if (event == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  std::shared_ptr<EventState> state = event->state;
  std::shared_ptr<GraphNodes> graph;
  uint64_t generation = 0;
  bool done = false;
  {
    // Not holding it while taking a stream's lock: a stream's worker completes events under that lock.
    std::lock_guard<std::mutex> lock(state->mutex);
    graph = openCaptureOf(*state);
    done = state->completed >= state->recorded;
    generation = state->recorded;
  }
  if (graph != nullptr) {
    if (graph->device != device) return fooErrorInvalidValue;  // a graph runs on one device
    return streamOf(device, stream).joinCapture(graph);
  }
  // A capture waits only on its own points: work outside it would not be in its replays.
  if (streamOf(device, stream).capturing()) return fooErrorStreamCaptureUnsupported;
  if (done) return fooSuccess;  // nothing to wait for
  return launchClosure(device, stream, [state, generation] { state->waitFor(generation); });
}

fooError_t fooEventElapsedTime(float* ms, fooEvent_t start, fooEvent_t end) {
  if (start == nullptr || end == nullptr || !start->state->enable_timing || !end->state->enable_timing) {
    return fooErrorInvalidValue;
  }
  std::chrono::steady_clock::time_point times[2];
  EventState* states[2] = {start->state.get(), end->state.get()};
  for (int i = 0; i < 2; ++i) {
    std::lock_guard<std::mutex> lock(states[i]->mutex);
    if (states[i]->recorded == 0 || states[i]->completed < states[i]->recorded) return fooErrorNotReady;
    times[i] = states[i]->time;
  }
  *ms = std::chrono::duration<float, std::milli>(times[1] - times[0]).count();
  return fooSuccess;
}

fooError_t fooStreamBeginCapture(int device, fooStream_t stream) {
  if (!validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  return streamOf(device, stream).beginCapture(device);
}

fooError_t fooStreamEndCapture(int device, fooStream_t stream, fooGraph_t* graph) {
  if (!validStream(device, stream) || graph == nullptr) return fooErrorInvalidValue;
  std::shared_ptr<GraphNodes> nodes;
  if (const fooError_t error = streamOf(device, stream).endCapture(&nodes); error != fooSuccess) return error;
  *graph = new fooGraph{std::move(nodes)};
  return fooSuccess;
}

fooError_t fooStreamIsCapturing(int device, fooStream_t stream, int* capturing) {
  if (!validStream(device, stream) || capturing == nullptr) return fooErrorInvalidValue;
  *capturing = streamOf(device, stream).capturing() ? 1 : 0;
  return fooSuccess;
}

fooError_t fooStreamGetCaptureId(int device, fooStream_t stream, unsigned long long* capture_id) {
  if (!validStream(device, stream) || capture_id == nullptr) return fooErrorInvalidValue;
  const std::shared_ptr<GraphNodes> graph = streamOf(device, stream).captureGraph();
  *capture_id = graph != nullptr ? graph->capture_id : 0;
  return fooSuccess;
}

fooError_t fooGraphGetNodeCount(fooGraph_t graph, size_t* count) {
  if (graph == nullptr || count == nullptr) return fooErrorInvalidValue;
  *count = graph->nodes->nodes.size();
  return fooSuccess;
}

fooError_t fooGraphGetNodeName(fooGraph_t graph, size_t index, const char** name) {
  if (graph == nullptr || name == nullptr || index >= graph->nodes->nodes.size()) return fooErrorInvalidValue;
  *name = graph->nodes->nodes[index].name.c_str();
  return fooSuccess;
}

fooError_t fooGraphLaunch(fooGraph_t graph, int device, fooStream_t stream) {
  if (graph == nullptr || !validStream(device, stream)) return fooErrorInvalidValue;
  if (const fooError_t error = ensureInitialized(); error != fooSuccess) return error;
  TracedLaunch* traced = traceLaunch(device, stream, fooActivityKindKernel, "fooGraph", "fooGraphLaunch");
  if (streamOf(device, stream).capturing()) {
    // Recorded into the graph being captured, it runs at that graph's replays, not in this one's order.
    return launchClosure(device, stream, [nodes = graph->nodes] { nodes->run(); }, /*marker=*/false, traced);
  }
  std::shared_ptr<EventState> launches = graph->launches;
  uint64_t launch = 0;
  {
    std::lock_guard<std::mutex> lock(launches->mutex);
    launch = ++launches->recorded;
  }
  // The queued launch holds the nodes: destroying the graph meanwhile releases nothing it still needs.
  const fooError_t error = launchClosure(device, stream, [nodes = graph->nodes, launches, launch] {
    launches->waitFor(launch - 1);  // the graph's previous launch, on any stream, has run
    nodes->run();
    launches->complete(launch);
  }, /*marker=*/false, traced);
  if (error != fooSuccess) launches->complete(launch);  // nothing will run: later launches need not wait for it
  return error;
}

fooError_t fooGraphDestroy(fooGraph_t graph) {
  delete graph;
  return fooSuccess;
}

}  // extern "C"
