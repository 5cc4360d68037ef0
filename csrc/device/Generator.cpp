#include "device/Generator.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "device/Common.h"

namespace foo {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(fooDevice(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::detail::createCPUGenerator(c10::default_rng_seed_val)) {}

// Kernels lock the host generator's mutex while drawing; seeding and state changes do too.
void GeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_current_seed(seed);
}

uint64_t GeneratorImpl::current_seed() const { return host_.current_seed(); }

uint64_t GeneratorImpl::seed() {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.seed();
}

void GeneratorImpl::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_offset(offset);
}

uint64_t GeneratorImpl::get_offset() const { return host_.get_offset(); }

void GeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return host_.unsafeGetGeneratorImpl()->get_state();
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
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
  if (!generator || !generator->defined()) return defaultGenerator(device).get<GeneratorImpl>()->hostGenerator();
  TORCH_CHECK(generator->device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'foo' device type for generator but found '", generator->device().type(), "'");
  return generator->get<GeneratorImpl>()->hostGenerator();
}

}  // namespace foo
