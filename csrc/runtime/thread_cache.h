// Per-thread caches and cache-line helpers: header-only, plain C++17 (no PyTorch, nothing of the runtime's
// API), so that code beside the runtime (csrc/device's per-thread caches) can include it too.
//
// A host thread that launches work keeps what the work held (a queue node, a work block) in a cache of its
// own and takes it again for its next launches: no lock, and memory stays on the thread that allocated it.
// The stream's worker read that memory meanwhile, so its cache lines are shared with the worker's core:
// prepareForWriting asks for them ahead of the first write.
#pragma once

#include <cstddef>
#include <thread>

namespace foo_runtime {

// Asks for the cache lines of [address, address + bytes) ahead of a write: a line another core (a
// stream's worker) holds must first be given up, which an early request overlaps with other work
// (PREFETCHW, a no-op on x86 processors without it). One request per 64 bytes, from `address`; nothing
// for a null address.
inline void prepareForWriting(const void* address, size_t bytes = 64) {
#if defined(__x86_64__)
  if (address == nullptr) return;
  for (size_t offset = 0; offset < bytes; offset += 64)
    asm volatile("prefetchw %0" : : "m"(*(static_cast<const char*>(address) + offset)));
#else
  (void)address;
  (void)bytes;
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

// A thread's cache, with a flag that says whether it exists: `thread_local ThreadCache<NodeCache> t_nodes;`
// makes each thread's cache on the thread's first use of t_nodes, and destroys it as the thread exits.
// ThreadCache<NodeCache>::alive is true from then until that destruction: something given back before the
// thread ever used its cache, or after it is gone (while the thread's other thread_locals are destroyed, or
// by work released at exit), checks it and goes to the heap instead, without making a cache or touching a
// destroyed one. One thread_local per Cache type: they share the flag.
template <class Cache>
struct ThreadCache {
  Cache cache;
  ThreadCache() { alive = true; }
  ~ThreadCache() { alive = false; }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  static thread_local bool alive;  // trivially destructible: readable while the thread exits
};
template <class Cache>
thread_local bool ThreadCache<Cache>::alive = false;

}  // namespace foo_runtime
