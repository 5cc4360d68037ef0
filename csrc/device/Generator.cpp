#include "device/Generator.h"

#include <ATen/CPUGeneratorImpl.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "device/Common.h"
#include "device/Launch.h"

namespace foo {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(fooDevice(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::detail::createCPUGenerator(c10::default_rng_seed_val)) {}

// Kernels lock the host generator's mutex while drawing; seeding and state changes do too.
void GeneratorImpl::set_current_seed(uint64_t seed) {
  waitForLaunchedDraws();
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_current_seed(seed);
}

uint64_t GeneratorImpl::current_seed() const { return host_.current_seed(); }

uint64_t GeneratorImpl::seed() {
  waitForLaunchedDraws();
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.seed();
}

void GeneratorImpl::set_offset(uint64_t offset) {
  waitForLaunchedDraws();
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_offset(offset);
}

uint64_t GeneratorImpl::get_offset() const {
  waitForLaunchedDraws();
  return host_.get_offset();
}

void GeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  waitForLaunchedDraws();
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  waitForLaunchedDraws();
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return host_.unsafeGetGeneratorImpl()->get_state();
}

c10::intrusive_ptr<c10::GeneratorImpl> GeneratorImpl::graphsafe_get_state() const {
  auto state = c10::make_intrusive<GeneratorImpl>(device().index());
  state->host_ = host_;
  return state;
}

void GeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* foo_state = dynamic_cast<GeneratorImpl*>(state.get());
  TORCH_CHECK(foo_state != nullptr, "graphsafe_set_state: expected the state of a foo generator, got one of a ",
              state->device().type(), " generator");
  host_ = foo_state->host_;  // launched kernels keep the state they were launched with: nothing to wait for
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  waitForLaunchedDraws();
  auto* copy = new GeneratorImpl(device().index());
  copy->host_ = host_.clone();
  return copy;
}

at::Generator makeGenerator(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  return at::make_generator<GeneratorImpl>(device);
}

const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static const std::vector<at::Generator> generators = perDevice(makeGenerator);
  checkDeviceIndex(device);
  return generators[static_cast<size_t>(device)];
}

at::Generator hostGeneratorFor(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  orderDraws(device, currentStream(device));  // the kernel about to draw comes after them in launch order
  if (!generator || !generator->defined()) return defaultGenerator(device).get<GeneratorImpl>()->hostGenerator();
  TORCH_CHECK(generator->device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'foo' device type for generator but found '", generator->device().type(), "'");
  return generator->get<GeneratorImpl>()->hostGenerator();
}

namespace {

using StreamKey = std::pair<c10::DeviceIndex, fooStream_t>;
std::mutex g_draws_mutex;  // held while waiting, so no draw overtakes random work another thread waits for
std::set<unsigned long long> g_drawing_captures;  // capture ids
// Per stream, an event recorded after the last random work launched there (re-recorded: a stream runs
// its work in order).
std::map<StreamKey, fooEvent_t> g_launched_draws;
std::atomic<bool> g_draws_pending{false};

}  // namespace

void noteCapturedDraws(unsigned long long capture_id) {
  std::lock_guard<std::mutex> lock(g_draws_mutex);
  g_drawing_captures.insert(capture_id);
}

bool takeCapturedDraws(unsigned long long capture_id) {
  std::lock_guard<std::mutex> lock(g_draws_mutex);
  return g_drawing_captures.erase(capture_id) != 0;
}

void noteLaunchedDraws(c10::DeviceIndex device, fooStream_t stream) {
  unsigned long long capture_id = 0;
  FOO_CHECK(fooStreamGetCaptureId(device, stream, &capture_id));
  if (capture_id != 0) {  // captured: the graph draws when it replays
    noteCapturedDraws(capture_id);
    return;
  }
  std::lock_guard<std::mutex> lock(g_draws_mutex);
  fooEvent_t& event = g_launched_draws[{device, stream}];
  if (event == nullptr) FOO_CHECK(fooEventCreate(&event, /*enable_timing=*/0));
  FOO_CHECK(fooEventRecord(event, device, stream));
  g_draws_pending.store(true, std::memory_order_release);
}

void orderDraws(c10::DeviceIndex device, fooStream_t stream) {
  if (!g_draws_pending.load(std::memory_order_acquire)) return;
  unsigned long long capture_id = 0;
  FOO_CHECK(fooStreamGetCaptureId(device, stream, &capture_id));
  if (capture_id != 0) {
    waitForLaunchedDraws();
    return;
  }
  std::lock_guard<std::mutex> lock(g_draws_mutex);
  for (const auto& [key, event] : g_launched_draws) {
    if (key.first == device && key.second != stream) FOO_CHECK(fooStreamWaitEvent(device, stream, event));
  }
}

void waitForLaunchedDraws() {
  if (!g_draws_pending.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_draws_mutex);
  bool done = true;
  for (const auto& entry : g_launched_draws) done = done && fooEventQuery(entry.second) == fooSuccess;
  if (!done) {
    beforeHostWait("the generator's state after queued random work");
    for (const auto& entry : g_launched_draws) FOO_CHECK(fooEventSynchronize(entry.second));
  }
  g_draws_pending.store(false, std::memory_order_relaxed);
}

}  // namespace foo
