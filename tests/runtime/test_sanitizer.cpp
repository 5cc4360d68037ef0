// Runtime tests: the sanitizer (races between streams, reuse of memory still in use, uninitialised reads).
// Launches here only declare their accesses: what orders them is the streams, events and host waits.
#include "harness.h"

namespace runtime_tests {
namespace {

// Contexts are ints the tests name launches by; the callbacks count what the runtime holds.
std::atomic<int> g_held{0};
void* retainContext(void* context) {
  ++g_held;
  return context;
}
void releaseContext(void*) { --g_held; }

int g_names[16];
void* named(int i) { return &g_names[i]; }
int nameOf(void* context) { return static_cast<int>(static_cast<int*>(context) - g_names); }

struct Sanitized {
  void* memory = nullptr;
  fooStream_t side = 0;
  explicit Sanitized(unsigned checks = fooSanitizerRaces) {
    EXPECT_OK(fooSanitizerSetContextCallbacks(&retainContext, &releaseContext));
    EXPECT_OK(fooSanitizerEnable(checks));
    EXPECT(fooSanitizerGetChecks() == checks);
    EXPECT_OK(fooMalloc(0, &memory, 4096));
    EXPECT_OK(fooStreamCreate(0, &side, 0));
  }
  const char* at(size_t offset) const { return static_cast<const char*>(memory) + offset; }
  fooError_t access(fooStream_t stream, size_t offset, size_t bytes, int write, int name) const {
    const fooMemoryAccess a{at(offset), bytes, write};
    return fooSanitizerCheckLaunch(0, stream, &a, 1, named(name));
  }
};

fooHazard lastHazard() {
  fooHazard hazard{};
  EXPECT_OK(fooSanitizerGetLastHazard(&hazard));
  return hazard;
}

RUNTIME_TEST(sanitizer_reports_unordered_conflicts_naming_both_launches) {
  Sanitized s;
  EXPECT_OK(s.access(0, 0, 64, 1, 1));  // the default stream writes
  EXPECT(s.access(s.side, 32, 64, 0, 2) == fooErrorHazard);  // the side stream reads, unordered
  fooHazard h = lastHazard();
  EXPECT(h.kind == fooHazardReadAfterWrite);
  EXPECT(nameOf(h.context) == 2 && h.stream == s.side && h.device == 0 && h.access == 0);
  EXPECT(nameOf(h.prior_context) == 1 && h.prior_stream == 0 && h.prior_write == 1 && h.prior_access == 0);
  EXPECT(h.address == s.at(32) && h.bytes == 32);  // the overlap
  // Nothing of the refused launch was recorded: the default stream writing again is no conflict.
  EXPECT_OK(s.access(0, 0, 64, 1, 3));
  // Write after read, and write after write.
  EXPECT_OK(s.access(0, 128, 8, 0, 4));
  EXPECT(s.access(s.side, 128, 8, 1, 5) == fooErrorHazard);
  EXPECT(lastHazard().kind == fooHazardWriteAfterRead);
  EXPECT(s.access(s.side, 0, 8, 1, 6) == fooErrorHazard);
  EXPECT(lastHazard().kind == fooHazardWriteAfterWrite);
  // Reads on two streams do not conflict; disjoint bytes of one allocation do not either.
  EXPECT_OK(s.access(s.side, 128, 8, 0, 7));
  EXPECT_OK(s.access(s.side, 64, 64, 1, 8));
  // A hazard is the thread's last until its next call.
  EXPECT(fooSanitizerGetLastHazard(&h) == fooErrorInvalidValue);
}

RUNTIME_TEST(sanitizer_orders_launches_by_events_and_host_waits) {
  Sanitized s;
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  // Consumer waits for producer.
  EXPECT_OK(s.access(0, 0, 64, 1, 1));
  EXPECT_OK(fooEventRecord(event, 0, 0));
  EXPECT_OK(fooStreamWaitEvent(0, s.side, event));
  EXPECT_OK(s.access(s.side, 0, 64, 0, 2));
  // The producer writes again without waiting for the consumer's read, then after it.
  EXPECT(s.access(0, 0, 64, 1, 3) == fooErrorHazard);
  EXPECT(lastHazard().kind == fooHazardWriteAfterRead);
  EXPECT_OK(fooEventRecord(event, 0, s.side));
  EXPECT_OK(fooStreamWaitEvent(0, 0, event));
  EXPECT_OK(s.access(0, 0, 64, 1, 3));
  // An event only orders what was launched before its record.
  EXPECT_OK(fooEventRecord(event, 0, 0));
  EXPECT_OK(s.access(0, 64, 64, 1, 4));
  EXPECT_OK(fooStreamWaitEvent(0, s.side, event));
  EXPECT(s.access(s.side, 64, 64, 0, 5) == fooErrorHazard);
  // The host's waits: a stream synchronization orders that stream's work before every later launch...
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT_OK(s.access(s.side, 64, 64, 0, 5));
  // ... as do an event synchronization, a device synchronization and a query that found the work done.
  EXPECT_OK(s.access(0, 256, 8, 1, 6));
  EXPECT_OK(fooEventRecord(event, 0, 0));
  EXPECT_OK(fooEventSynchronize(event));
  EXPECT_OK(s.access(s.side, 256, 8, 1, 7));
  EXPECT_OK(fooDeviceSynchronize(0));
  EXPECT_OK(s.access(0, 256, 8, 1, 8));
  EXPECT(s.access(s.side, 256, 8, 0, 9) == fooErrorHazard);
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT(fooStreamQuery(0, 0) == fooSuccess);
  EXPECT_OK(s.access(s.side, 256, 8, 0, 9));
  EXPECT_OK(fooEventDestroy(event));
}

RUNTIME_TEST(sanitizer_reports_memory_reused_while_another_stream_uses_it) {
  Sanitized s;
  EXPECT_OK(fooSanitizerAllocate(0, 0, s.at(0), 512, named(1)));
  EXPECT_OK(s.access(0, 0, 512, 1, 2));
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT_OK(s.access(s.side, 0, 512, 0, 3));  // read on the side stream
  EXPECT_OK(fooSanitizerFree(0, 0, s.at(0), 512, named(4)));  // freed to the default stream, no record_stream
  EXPECT(fooSanitizerAllocate(0, 0, s.at(256), 128, named(5)) == fooErrorHazard);
  const fooHazard h = lastHazard();
  EXPECT(h.kind == fooHazardReuse && nameOf(h.context) == 5 && nameOf(h.free_context) == 4);
  EXPECT(nameOf(h.prior_context) == 3 && h.prior_stream == s.side && h.prior_write == 0);
  EXPECT(h.address == s.at(256) && h.bytes == 128);
  // As record_stream does: an event recorded on the user's stream, found complete before the reuse.
  EXPECT_OK(fooSanitizerFree(0, 0, s.at(0), 512, named(4)));
  fooEvent_t event = nullptr;
  EXPECT_OK(fooEventCreate(&event, 0));
  EXPECT_OK(fooEventRecord(event, 0, s.side));
  EXPECT_OK(fooEventSynchronize(event));
  EXPECT(fooEventQuery(event) == fooSuccess);
  EXPECT_OK(fooSanitizerAllocate(0, 0, s.at(0), 512, named(6)));
  EXPECT_OK(fooEventDestroy(event));
}

RUNTIME_TEST(sanitizer_reports_reads_of_bytes_never_written) {
  Sanitized s(fooSanitizerRaces | fooSanitizerInitialization);
  EXPECT_OK(fooSanitizerAllocate(0, 0, s.at(0), 256, named(1)));
  EXPECT(s.access(0, 0, 4, 0, 2) == fooErrorHazard);
  fooHazard h = lastHazard();
  EXPECT(h.kind == fooHazardUninitializedRead && h.prior_context == nullptr && nameOf(h.context) == 2);
  EXPECT_OK(s.access(0, 0, 128, 1, 3));  // writes half
  EXPECT_OK(s.access(0, 0, 128, 0, 4));
  EXPECT(s.access(0, 64, 128, 0, 5) == fooErrorHazard);
  h = lastHazard();
  EXPECT(h.address == s.at(128) && h.bytes == 64);
  // Bytes the sanitizer never saw allocated count as written.
  EXPECT_OK(s.access(0, 1024, 64, 0, 6));
  // Not checked: bytes the launch also writes, and a strided view's span.
  EXPECT_OK(fooSanitizerAllocate(0, 0, s.at(2048), 256, named(10)));
  const fooMemoryAccess in_place[2] = {{s.at(2048), 64, 0, 0}, {s.at(2048), 64, 1, 0}};
  EXPECT_OK(fooSanitizerCheckLaunch(0, 0, in_place, 2, named(11)));
  const fooMemoryAccess span{s.at(2048 + 128), 64, 0, 1};
  EXPECT_OK(fooSanitizerCheckLaunch(0, 0, &span, 1, named(12)));
  // Reallocated bytes are unwritten again.
  EXPECT_OK(fooSanitizerFree(0, 0, s.at(0), 256, named(7)));
  EXPECT_OK(fooSanitizerAllocate(0, 0, s.at(0), 256, named(8)));
  EXPECT(s.access(0, 0, 4, 0, 9) == fooErrorHazard);
}

RUNTIME_TEST(sanitizer_checks_a_graphs_captured_accesses_at_each_launch) {
  Sanitized s;
  EXPECT_OK(fooStreamBeginCapture(0, s.side));
  EXPECT_OK(s.access(s.side, 0, 64, 0, 1));  // kept with the graph, not checked now
  EXPECT_OK(s.access(s.side, 64, 64, 1, 2));
  fooGraph_t graph = nullptr;
  EXPECT_OK(fooStreamEndCapture(0, s.side, &graph));
  EXPECT_OK(s.access(0, 0, 64, 1, 3));  // the default stream writes what the graph reads
  EXPECT(fooSanitizerCheckGraphLaunch(graph, 0, s.side) == fooErrorHazard);
  const fooHazard h = lastHazard();
  EXPECT(h.kind == fooHazardReadAfterWrite && nameOf(h.context) == 1 && nameOf(h.prior_context) == 3);
  EXPECT_OK(fooStreamSynchronize(0, 0));
  EXPECT_OK(fooSanitizerCheckGraphLaunch(graph, 0, s.side));
  EXPECT_OK(fooGraphLaunch(graph, 0, s.side));
  EXPECT(s.access(0, 64, 8, 0, 4) == fooErrorHazard);  // the launch's writes are recorded
  EXPECT(nameOf(lastHazard().prior_context) == 2);
  // A graph's launches are ordered after each other, on any stream.
  EXPECT_OK(fooSanitizerCheckGraphLaunch(graph, 0, 0));
  EXPECT_OK(fooGraphLaunch(graph, 0, 0));
  EXPECT_OK(fooStreamSynchronize(0, s.side));
  EXPECT_OK(fooStreamSynchronize(0, 0));
  // Recording without a check records the launch even where it conflicts.
  EXPECT_OK(s.access(s.side, 0, 64, 1, 5));
  EXPECT_OK(fooSanitizerRecordGraphLaunch(graph, 0, 0));
  EXPECT(s.access(s.side, 64, 8, 0, 6) == fooErrorHazard);
  EXPECT_OK(fooGraphDestroy(graph));
}

RUNTIME_TEST(sanitizer_holds_contexts_while_it_remembers_them) {
  {
    Sanitized s;
    EXPECT_OK(s.access(0, 0, 64, 1, 1));
    EXPECT_OK(s.access(0, 0, 64, 0, 2));
    EXPECT(g_held == 2);
    EXPECT_OK(s.access(0, 0, 64, 1, 3));  // overwrites both
    EXPECT(g_held == 1);
    EXPECT(s.access(s.side, 0, 8, 1, 4) == fooErrorHazard);
    EXPECT(g_held == 2);  // the hazard holds the refused launch's context
    EXPECT_OK(fooStreamSynchronize(0, 0));
    EXPECT(g_held == 2);
  }
  EXPECT_OK(fooSanitizerEnable(0));  // forgets everything (the thread's last hazard with its next call)
  EXPECT(g_held == 0);
  // Off, nothing is checked or held.
  const fooMemoryAccess write{nullptr, 8, 1};
  EXPECT_OK(fooSanitizerCheckLaunch(0, 0, &write, 1, named(1)));
  EXPECT(g_held == 0);
}

}  // namespace
}  // namespace runtime_tests
