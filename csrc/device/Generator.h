// foo's random number generators. Each one keeps its state in a CPU generator (mt19937): foo runs
// CPU's random kernels on device memory and hands them that generator, so for the same seed foo
// draws exactly the numbers CPU draws, and foo's RNG state has CPU's format.
#pragma once

#include <ATen/core/Generator.h>

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

}  // namespace foo
