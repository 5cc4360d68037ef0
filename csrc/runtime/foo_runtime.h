// The simulated foo device runtime: a small C-like driver API, in the spirit of a vendor runtime.
//
// It knows nothing of PyTorch. Each device owns a fixed amount of memory. A pointer returned by
// fooMalloc is a *device address*: the range is mapped with no access rights, so host code that
// dereferences it faults, exactly as with a GPU pointer. The same physical memory is mapped a second
// time, readable and writable, for kernels: fooKernelAddress translates a device address into that
// kernel view at no cost. All device work (kernels and copies) is launched onto a stream.
//
// For backend authors, each call and its CUDA counterpart (runtime API unless named otherwise). Calls on a
// device or stream take the device as an argument where CUDA uses the current device.
//   fooGetErrorString                     cudaGetErrorString
//   fooGetDeviceCount                     cudaGetDeviceCount
//   fooInit                               cudaInitDevice (CUDA also initialises lazily, on first use)
//   fooIsInitialized                      none (PyTorch's torch.cuda.is_initialized keeps its own flag)
//   fooIsInBadFork                        none (PyTorch's _is_in_bad_fork; CUDA fails in the forked child)
//   fooGetDevice / fooSetDevice           cudaGetDevice / cudaSetDevice
//   fooGetDeviceProperties                cudaGetDeviceProperties
//   fooMalloc / fooFree                   cudaMalloc / cudaFree
//   fooMemGetInfo                         cudaMemGetInfo
//   fooPointerGetDevice                   cudaPointerGetAttributes (its device)
//   fooMemGetAddressRange                 cuMemGetAddressRange (driver API)
//   fooIpcGetMemHandle / fooIpcOpenMemHandle / fooIpcCloseMemHandle
//                                         cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle
//   fooEventCreateInterprocess            cudaEventCreateWithFlags(cudaEventInterprocess | cudaEventDisableTiming)
//   fooIpcGetEventHandle / fooIpcOpenEventHandle
//                                         cudaIpcGetEventHandle / cudaIpcOpenEventHandle
//   fooKernelAddress / fooDeviceAddress   none: the kernel view exists because kernels here are host code
//   fooHostAlloc / fooFreeHost            cudaHostAlloc / cudaFreeHost
//   fooHostPointerIsPinned                cudaPointerGetAttributes (its type is cudaMemoryTypeHost)
//   fooStreamCreate                       cudaStreamCreateWithPriority (handed out from pools, as PyTorch's
//                                         getStreamFromPool does)
//   fooStreamGetPriority                  cudaStreamGetPriority
//   fooLaunchBlocking                     none (CUDA_LAUNCH_BLOCKING=1, an environment variable)
//   fooLaunchKernel                       a kernel launch (cudaLaunchKernel, <<<...>>>); cudaLaunchHostFunc
//                                         runs host code on a stream the same way
//   fooLaunchKernelEx                     the same, with a kind and name for tracing; `release` has none
//   fooStreamRunSynchronous               none (the host side of a synchronous cudaMemcpy)
//   fooStreamGetLaunchCount               none
//   fooStreamQuery                        cudaStreamQuery
//   fooStreamSynchronize                  cudaStreamSynchronize
//   fooDeviceSynchronize                  cudaDeviceSynchronize
//   fooEventCreate                        cudaEventCreateWithFlags (enable_timing 0: cudaEventDisableTiming)
//   fooEventDestroy                       cudaEventDestroy
//   fooEventRecord                        cudaEventRecord
//   fooEventQuery                         cudaEventQuery
//   fooEventSynchronize                   cudaEventSynchronize
//   fooStreamWaitEvent                    cudaStreamWaitEvent
//   fooEventElapsedTime                   cudaEventElapsedTime
//   fooStreamBeginCapture                 cudaStreamBeginCapture
//   fooStreamEndCapture                   cudaStreamEndCapture, then cudaGraphInstantiate (a fooGraph is both)
//   fooStreamIsCapturing                  cudaStreamIsCapturing
//   fooStreamGetCaptureId                 cudaStreamGetCaptureInfo (its id)
//   fooGraphGetNodeCount                  cudaGraphGetNodes (their count)
//   fooGraphGetNodeName                   none (CUDA's graph nodes have no names)
//   fooGraphLaunch                        cudaGraphLaunch
//   fooGraphDestroy                       cudaGraphExecDestroy and cudaGraphDestroy
//   fooActivityEnable                     CUPTI's cuptiActivityEnable / cuptiActivityDisable
//   fooActivityIsEnabled                  none
//   fooActivityPushExternalCorrelationId  CUPTI's cuptiActivityPushExternalCorrelationId
//   fooActivityPopExternalCorrelationId   CUPTI's cuptiActivityPopExternalCorrelationId
//   fooActivityFlush                      CUPTI's cuptiActivityFlushAll, with its buffer callbacks
//   fooSanitizer*                         compute-sanitizer's racecheck and initcheck, at the launch level
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef enum fooError {
  fooSuccess = 0,
  fooErrorInvalidDevice = 1,
  fooErrorMemoryAllocation = 2,
  fooErrorInvalidValue = 3,
  fooErrorNotReady = 4,
  fooErrorInitialization = 5,
  // This process was forked after the runtime was initialised (the device belongs to the parent).
  fooErrorForkedProcess = 6,
  // The call would wait for, or add host work to, a stream that is capturing a graph.
  fooErrorStreamCaptureUnsupported = 7,
  // The sanitizer found a hazard (fooSanitizerGetLastHazard describes it).
  fooErrorHazard = 8,
  // An interprocess handle cannot be opened: the process that made it has exited, or it is not a handle.
  fooErrorInvalidIpcHandle = 9,
} fooError_t;

const char* fooGetErrorString(fooError_t error);

// ---- Devices ------------------------------------------------------------------------------------
// At most this many devices: FOO_DEVICE_COUNT is capped to it.
#define FOO_MAX_DEVICES 16
// fooGetDeviceCount reads FOO_DEVICE_COUNT (default 2) and does not initialise the runtime.
fooError_t fooGetDeviceCount(int* count);
// Maps every device's memory (FOO_DEVICE_MEMORY_MB each, default a quarter of host RAM). Idempotent;
// every call below that needs a device initialises lazily.
fooError_t fooInit(void);
int fooIsInitialized(void);
// True in a child forked after the runtime was initialised: every call that would use a device fails
// there with fooErrorForkedProcess (freeing is a no-op: the memory is the parent's).
int fooIsInBadFork(void);
// The calling thread's current device, as cudaGetDevice/cudaSetDevice.
fooError_t fooGetDevice(int* device);
fooError_t fooSetDevice(int device);

typedef struct fooDeviceProp {
  char name[64];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
} fooDeviceProp;
fooError_t fooGetDeviceProperties(fooDeviceProp* prop, int device);

// ---- Memory -------------------------------------------------------------------------------------
// Allocate/free device memory on `device` (page granular; freed pages go back to the host).
fooError_t fooMalloc(int device, void** dev_ptr, size_t size);
fooError_t fooFree(int device, void* dev_ptr);
fooError_t fooMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// The allocation holding a device address: its base and size (fooMalloc's, or memory opened from another
// process).
fooError_t fooMemGetAddressRange(void** base, size_t* bytes, const void* dev_ptr);
// The device owning a device address, or -1 when `ptr` is not one.
int fooPointerGetDevice(const void* ptr);
// Host-accessible kernel view of a device address (nullptr when `dev_ptr` is not one).
void* fooKernelAddress(const void* dev_ptr);
// The device address behind a kernel-view address (nullptr when `kernel_ptr` is not one).
void* fooDeviceAddress(const void* kernel_ptr);

// ---- Pinned host memory --------------------------------------------------------------------------
// Page-locked host memory (cudaHostAlloc/cudaFreeHost); copies from it may run asynchronously.
fooError_t fooHostAlloc(void** ptr, size_t size);
fooError_t fooFreeHost(void* ptr);
// 1 when `ptr` lies inside memory from fooHostAlloc, else 0.
int fooHostPointerIsPinned(const void* ptr);

// ---- Streams, kernels, events -------------------------------------------------------------------
// Stream 0 of each device is its default stream. A stream is an ordered queue of launched work, run by
// the stream's own worker thread: launches return at once and the work runs later, in launch order.
// FOO_LAUNCH_BLOCKING=1 runs every launch inline on the calling thread instead.
typedef int64_t fooStream_t;
typedef void (*fooKernelFn)(void* arg);
// Frees a launch's argument once the runtime no longer needs it.
typedef void (*fooReleaseFn)(void* arg);

// Hands out a stream of the given priority (0, or -1 for high; others are clamped) from a fixed pool
// per device, round-robin, as CUDA's stream pools do.
fooError_t fooStreamCreate(int device, fooStream_t* stream, int priority);
fooError_t fooStreamGetPriority(int device, fooStream_t stream, int* priority);
// 1 when FOO_LAUNCH_BLOCKING=1 makes every launch run inline.
int fooLaunchBlocking(void);
// What a launch runs, for activity tracing (below).
typedef enum fooActivityKind {
  fooActivityKindKernel = 0,   // a kernel a stream runs
  fooActivityKindMemcpy = 1,   // a copy a stream runs
  fooActivityKindRuntime = 2,  // a runtime call on the host: the launch of one of the two above
} fooActivityKind;
// Queues fn(arg) on the stream, after all work launched on it before. `arg` must stay valid until fn
// has run, and fn must not throw (it runs on the stream's worker thread).
fooError_t fooLaunchKernel(int device, fooStream_t stream, fooKernelFn fn, void* arg);
// fooLaunchKernel with what activity tracing records of the work, its kind (a kernel or a copy) and name
// (copied; may be null), and `release` (may be null): called with `arg` once the runtime no longer needs it,
// after fn ran or, for a launch a graph captured, when the graph is destroyed (fn may then run many times).
// After a run, a host thread that launches kernels on the stream (every 16th launch gives back what ran
// before it), queries or synchronizes it calls it, as the host frees what it allocated (the worker does
// once the stream idles): so release must not take a lock its caller may hold while launching. Several
// threads may give back one stream's work at once, each launch's argument exactly once. When a stream or
// device synchronization returns, or a query says the stream is done, the arguments of the work it
// waited for are released, by whichever thread; an event's completion says nothing about them.
// Only a launch with `release` can be captured.
fooError_t fooLaunchKernelEx(int device, fooStream_t stream, fooKernelFn fn, void* arg, fooReleaseFn release,
                             fooActivityKind kind, const char* name);
// Runs fn(arg) on the calling thread once all work launched on the stream before has completed, and
// returns when it is done: the stream's synchronous work, whose result the host needs at once (as a
// synchronous cudaMemcpy). It holds the stream meanwhile: a launch from another host thread (other than
// an event record) returns only after fn, so no thread frees memory that its queued work still uses
// while fn runs (a stream-ordered allocator would hand it to fn, which is not ordered after that work).
// Traced as work of the stream, like a launch. fn must not throw.
fooError_t fooStreamRunSynchronous(int device, fooStream_t stream, fooKernelFn fn, void* arg, fooActivityKind kind,
                                   const char* name);
// How many launches (kernels, event records, event waits) the stream has received; unchanged between two
// reads, the stream got no work in between. (With FOO_LAUNCH_BLOCKING=1, launches run inline and do not
// count: the stream never has work pending.)
fooError_t fooStreamGetLaunchCount(int device, fooStream_t stream, uint64_t* count);
// fooSuccess when all work launched on the stream has completed, else fooErrorNotReady.
fooError_t fooStreamQuery(int device, fooStream_t stream);
fooError_t fooStreamSynchronize(int device, fooStream_t stream);
fooError_t fooDeviceSynchronize(int device);

// An event is a marker in a stream's queue: recording it queues the marker, and it completes when the
// stream's worker reaches it. A stream that waits on an event runs nothing launched after the wait
// until the event's latest recording completes.
typedef struct fooEvent* fooEvent_t;
fooError_t fooEventCreate(fooEvent_t* event, int enable_timing);
fooError_t fooEventDestroy(fooEvent_t event);
fooError_t fooEventRecord(fooEvent_t event, int device, fooStream_t stream);
fooError_t fooEventQuery(fooEvent_t event);
fooError_t fooEventSynchronize(fooEvent_t event);
fooError_t fooStreamWaitEvent(int device, fooStream_t stream, fooEvent_t event);
fooError_t fooEventElapsedTime(float* ms, fooEvent_t start, fooEvent_t end);

// ---- Graphs --------------------------------------------------------------------------------------
// As CUDA's stream capture: between fooStreamBeginCapture and fooStreamEndCapture, launches on the stream
// are recorded into a graph instead of run; fooGraphLaunch queues the recorded work on a stream, in order,
// as many times as wanted, with the same arguments (the same device memory). While a stream captures,
// whatever would wait for it or add host work to it fails with fooErrorStreamCaptureUnsupported:
// synchronizing or querying it (or its device), synchronous runs, waiting on an event recorded outside
// the capture, querying or synchronizing an event recorded in it, and launches without a release
// function. Other streams are unaffected until they wait on an event recorded in the capture: then they
// join it (as CUDA's fork into another stream), their launches recorded into the same graph, in the
// order they were made with the capturing stream's, until the capture ends on the stream that began it.
typedef struct fooGraph* fooGraph_t;
fooError_t fooStreamBeginCapture(int device, fooStream_t stream);
fooError_t fooStreamEndCapture(int device, fooStream_t stream, fooGraph_t* graph);
fooError_t fooStreamIsCapturing(int device, fooStream_t stream, int* capturing);
// The id of the capture the stream records into (its own, or one it joined); 0 when it is not capturing.
fooError_t fooStreamGetCaptureId(int device, fooStream_t stream, unsigned long long* capture_id);
fooError_t fooGraphGetNodeCount(fooGraph_t graph, size_t* count);
// The name of the graph's `index`-th launch (valid as long as the graph).
fooError_t fooGraphGetNodeName(fooGraph_t graph, size_t index, const char** name);
// Queues the graph's work on the stream as one piece of work (traced as a kernel named "fooGraph"). As
// CUDA's launches of one executable graph, it runs after the graph's previous launch, on whichever stream.
fooError_t fooGraphLaunch(fooGraph_t graph, int device, fooStream_t stream);
// Releases the captured launches' arguments once no launch of the graph is still queued.
fooError_t fooGraphDestroy(fooGraph_t graph);

// ---- Sharing with other processes -----------------------------------------------------------------
// As CUDA IPC: a handle is 64 bytes that a process sends to another process of the machine, any way it likes;
// the receiver opens it to reach the same device memory, or the same event. Opened memory is device memory of
// the same device index in the receiver, at a device address of its own (host code cannot dereference it,
// kernels reach it through fooKernelAddress), not counted as its allocation (fooMemGetInfo). Both processes
// must see the same devices (FOO_DEVICE_COUNT): else fooErrorInvalidDevice. The exporting process must be
// alive when a handle is opened (fooErrorInvalidIpcHandle otherwise); what is open stays valid after it exits.
// Handles reach the exporter's memory through /proc/<pid>/fd: processes of one user on one machine.
#define FOO_IPC_HANDLE_SIZE 64
typedef struct fooIpcMemHandle {
  char reserved[FOO_IPC_HANDLE_SIZE];
} fooIpcMemHandle_t;
typedef struct fooIpcEventHandle {
  char reserved[FOO_IPC_HANDLE_SIZE];
} fooIpcEventHandle_t;
// A handle of the whole allocation holding `dev_ptr` (fooMemGetAddressRange gives its base): memory from
// fooMalloc, or memory this process opened, to share it on.
fooError_t fooIpcGetMemHandle(fooIpcMemHandle_t* handle, void* dev_ptr);
// The device address of the handle's allocation in this process. Opening one allocation again returns the
// same address (each open needs its close); a handle of this process's own memory opens to its address.
fooError_t fooIpcOpenMemHandle(void** dev_ptr, fooIpcMemHandle_t handle);
// Unmaps memory fooIpcOpenMemHandle returned (at its last close); the exporter's memory is untouched.
fooError_t fooIpcCloseMemHandle(void* dev_ptr);
// An event other processes can open (cudaEventCreateWithFlags(cudaEventInterprocess | cudaEventDisableTiming)):
// it measures no time. Records, waits, queries and synchronizations in any process that opened it see the
// records of all of them.
fooError_t fooEventCreateInterprocess(fooEvent_t* event);
// A handle of an event fooEventCreateInterprocess made in this process.
fooError_t fooIpcGetEventHandle(fooIpcEventHandle_t* handle, fooEvent_t event);
// An event of this process standing for the handle's event; fooEventDestroy releases it.
fooError_t fooIpcOpenEventHandle(fooEvent_t* event, fooIpcEventHandle_t handle);

// ---- Activity tracing ---------------------------------------------------------------------------
// What a profiler reads, as from CUPTI's activity API: while tracing is enabled, every launch (and
// synchronous run) of a kernel or copy yields two records when its work completes: the work on its
// stream, with the times it started and ended there, and the launch call on the host thread that made
// it. The two share a correlation id; both carry the external id the launching thread pushed last (a
// profiler's id for the operator that launched the work). Event records and waits are not traced.
typedef struct fooActivityRecord {
  fooActivityKind kind;
  const char* name;         // "kernel" for an unnamed launch; valid during the flush callback only
  int device;
  fooStream_t stream;
  uint64_t thread_id;       // the launching thread (Linux thread id)
  uint64_t correlation_id;  // shared by a launch's two records
  uint64_t external_id;     // the launching thread's innermost pushed external id; 0 when none
  int64_t start_ns;         // wall-clock time (CLOCK_REALTIME), nanoseconds since the epoch
  int64_t end_ns;
} fooActivityRecord;
// Enabling forgets the records not yet flushed and starts a new trace; disabling stops recording new
// launches (work launched before still yields its records when it completes).
fooError_t fooActivityEnable(int enable);
// 1 while tracing is enabled: a caller can skip preparing names nobody records.
int fooActivityIsEnabled(void);
// A per-thread stack of external ids (cuptiActivityPushExternalCorrelationId).
fooError_t fooActivityPushExternalCorrelationId(uint64_t id);
fooError_t fooActivityPopExternalCorrelationId(uint64_t* id);
// Calls `callback` for each record of completed work (launch records too), oldest first, and forgets them.
typedef void (*fooActivityCallback)(const fooActivityRecord* record, void* user_data);
fooError_t fooActivityFlush(fooActivityCallback callback, void* user_data);

// ---- Sanitizer ----------------------------------------------------------------------------------
// Finds races between streams and reads of uninitialised memory deterministically, where a GPU shows them
// only when timing exposes them. A launcher declares the device bytes each launch reads and writes
// (fooSanitizerCheckLaunch, just before launching it); the runtime orders launches by what orders them:
// a stream's launch order, event records and waits, graph launches, and the host's waits (stream, event and
// device synchronizations, and queries that found the work done, after which every later launch comes
// after that work), with a vector clock per stream. An access conflicts with an access of another stream
// to overlapping bytes that it is not ordered after when one of them writes. The caching allocator declares
// its frees and allocations: an allocation of bytes that a launch not ordered before it may still use is
// a hazard too (memory freed without record_stream, then reused). With fooSanitizerInitialization, a read
// of bytes not written since their allocation is one. While no check is enabled every call below but
// fooSanitizerEnable and fooSanitizerGetChecks does nothing, and the runtime's own calls pay one load.
typedef enum fooSanitizerCheck {
  fooSanitizerRaces = 1,           // unordered conflicting accesses, and reuse of memory still in use
  fooSanitizerInitialization = 2,  // reads of bytes never written since their allocation
} fooSanitizerCheck;
typedef struct fooMemoryAccess {
  const void* address;  // a device address
  size_t bytes;
  int write;            // 0: read, 1: written (a write that also reads is declared as a write)
  // 1: a read of a strided view's span, whose bytes between elements are not all read: checked for races,
  // not for initialization. (A read of bytes the same launch writes is not checked for initialization either.)
  int span;
} fooMemoryAccess;
typedef enum fooHazardKind {
  fooHazardReadAfterWrite = 1,    // reads bytes another stream's unordered launch writes
  fooHazardWriteAfterRead = 2,    // writes bytes another stream's unordered launch reads
  fooHazardWriteAfterWrite = 3,   // writes bytes another stream's unordered launch writes
  fooHazardUninitializedRead = 4, // reads bytes never written since their allocation
  fooHazardReuse = 5,             // allocates freed bytes that another stream's unordered launch uses
} fooHazardKind;
// What the sanitizer found. A context is what the launcher passed with a launch, allocation or free (its
// description: an operator, a stack): the runtime keeps it while it remembers what it describes, holding it
// with the callbacks of fooSanitizerSetContextCallbacks.
typedef struct fooHazard {
  fooHazardKind kind;
  int device;
  fooStream_t stream;
  void* context;          // of the launch or allocation that found the hazard
  size_t access;          // its access in conflict (an index into its accesses; 0 for an allocation)
  const void* address;    // the first bytes in conflict
  size_t bytes;
  // The other side (none for fooHazardUninitializedRead: prior_context is null).
  void* prior_context;
  size_t prior_access;
  int prior_write;
  int prior_device;
  fooStream_t prior_stream;
  void* free_context;     // fooHazardReuse: the free of the bytes
} fooHazard;
typedef void* (*fooContextRetainFn)(void* context);
// Enables the checks (fooSanitizerCheck bits; 0 turns the sanitizer off and forgets what it knew). Enable
// it before the first launch: it knows nothing of earlier work.
fooError_t fooSanitizerEnable(unsigned checks);
unsigned fooSanitizerGetChecks(void);
// How the runtime holds and lets go of contexts (both may be null: contexts are then not owned).
fooError_t fooSanitizerSetContextCallbacks(fooContextRetainFn retain, fooReleaseFn release);
// Checks the accesses of the calling thread's next launch on the stream and, when none is a hazard,
// records them; else returns fooErrorHazard and records nothing. While the stream captures, the accesses
// are kept with the graph, for fooSanitizerCheckGraphLaunch.
fooError_t fooSanitizerCheckLaunch(int device, fooStream_t stream, const fooMemoryAccess* accesses, size_t count,
                                   void* context);
// Records the accesses without checking them (after a hazard the caller only reported).
fooError_t fooSanitizerRecordLaunch(int device, fooStream_t stream, const fooMemoryAccess* accesses, size_t count,
                                    void* context);
// The same for a graph launch: the accesses its capture kept, as one launch on the stream, after the graph's
// previous launch.
fooError_t fooSanitizerCheckGraphLaunch(fooGraph_t graph, int device, fooStream_t stream);
fooError_t fooSanitizerRecordGraphLaunch(fooGraph_t graph, int device, fooStream_t stream);
// The caching allocator's frees (bytes returned to its cache, reusable on `stream`) and allocations (bytes
// handed out for use on `stream`: checked for fooHazardReuse; always recorded, as unwritten bytes).
fooError_t fooSanitizerFree(int device, fooStream_t stream, const void* address, size_t bytes, void* context);
fooError_t fooSanitizerAllocate(int device, fooStream_t stream, const void* address, size_t bytes, void* context);
// While the calling thread hides its host waits (hide > 0; calls nest), they order nothing: for waits the
// launcher makes that the program it runs would not (a launch it runs at once where a GPU queues it).
fooError_t fooSanitizerHideHostWaits(int hide);
// The calling thread's last hazard; its contexts stay valid until the thread's next sanitizer call.
fooError_t fooSanitizerGetLastHazard(fooHazard* hazard);

}  // extern "C"
