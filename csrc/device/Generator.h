// foo's random number generators. Each one keeps its state in a CPU generator (mt19937): foo runs
// CPU's random kernels on device memory and hands them that generator, so for the same seed foo
// draws exactly the numbers CPU draws, and foo's RNG state has CPU's format.
#pragma once

#include <ATen/core/Generator.h>

#include "runtime/foo_runtime.h"

namespace foo {

struct GeneratorImpl final : public c10::GeneratorImpl {
  explicit GeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator the host kernels draw from.
  const at::Generator& hostGenerator() const { return host_; }

 private:
  GeneratorImpl* clone_impl() const override;
  at::Generator host_;
};

at::Generator makeGenerator(c10::DeviceIndex device);
const at::Generator& defaultGenerator(c10::DeviceIndex device);

// The CPU generator a host kernel must use for `generator` (a foo generator, or none: the default one
// of `device`).
at::Generator hostGeneratorFor(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

// Random operators in graphs. CUDA's graphs take their philox offsets when a replay is launched; foo's
// random kernels draw from the host generator when they run. A random operator captured in a graph
// therefore draws when a replay runs it on the stream's worker, and every host access to generator state
// (a synchronous random operator, seeding, get/set_state) first waits for the replays launched before
// it: the draws happen in program order, and a replay draws what the same operators would draw eagerly.
//
// A random launch was captured by the capture `capture_id` (execution, while capturing).
void noteCapturedDraws(unsigned long long capture_id);
// Whether the capture `capture_id` captured random launches; forgets it (graphs, at the capture's end).
bool takeCapturedDraws(unsigned long long capture_id);
// A graph with random launches was launched on `stream` (graphs, after the launch): later host accesses
// to generator state wait for it. Inside another capture, that capture draws instead.
void noteReplayedDraws(c10::DeviceIndex device, fooStream_t stream);
// Waits for the random work of every replay launched so far (nothing to wait for: an atomic load).
void waitForReplayedDraws();

}  // namespace foo
