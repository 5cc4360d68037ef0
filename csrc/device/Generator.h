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
  // CUDA's graph-safe states: a state is a generator sharing this one's CPU generator (what it draws from);
  // setting one makes this generator draw from that state's. A random kernel draws from the state its
  // generator had at launch, when it runs or at each replay of a graph that captured it.
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
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

// Random operators are queued like any other. CUDA's kernels take their philox offsets when they are
// launched; foo's random kernels draw from the host generator when they run on the stream's worker (or
// when a graph replay runs them). So that the draws happen in launch order, and a queued operator draws
// exactly what CPU would draw in its place:
// - a random launch on one stream is ordered on the device after the random work launched on the
//   device's other streams (the stream waits for their events: orderDraws);
// - every host access to generator state (seeding, get/set_state, a clone) first waits for the random
//   work launched before it (waitForLaunchedDraws).
//
// Orders a random launch about to be made on `stream` of `device` (execution, before the launch).
// Inside a capture, the host waits instead: a capture cannot wait for work launched outside it.
void orderDraws(c10::DeviceIndex device, fooStream_t stream);
// Random work was launched on `stream`: a queued random operator, or a graph that captured some
// (execution and graphs, after the launch). Into a capture, that capture draws when it replays.
void noteLaunchedDraws(c10::DeviceIndex device, fooStream_t stream);
// A random launch was captured by the capture `capture_id`.
void noteCapturedDraws(unsigned long long capture_id);
// Whether the capture `capture_id` captured random launches; forgets it (graphs, at the capture's end).
bool takeCapturedDraws(unsigned long long capture_id);
// Waits for the random work launched so far, if any is still to run (else an atomic load).
void waitForLaunchedDraws();

}  // namespace foo
