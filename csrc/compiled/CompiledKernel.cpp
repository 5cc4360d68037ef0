#include "compiled/CompiledKernel.h"

#include <c10/util/SmallVector.h>

#include <cstring>

#include "device/Common.h"
#include "device/Launch.h"
#include "device/Sanitizer.h"

namespace foo {

CompiledKernel::CompiledKernel(std::string name, uintptr_t entry, const std::vector<std::string>& parameter_types)
    : name_(std::move(name)), entry_(reinterpret_cast<Entry>(entry)) {
  TORCH_CHECK(entry_ != nullptr, "foo: compiled kernel ", name_, " has no entry point");
  for (const std::string& type : parameter_types) {
    std::string base = type.rfind("const ", 0) == 0 ? type.substr(6) : type;
    writes_.push_back(base.size() == type.size() && !base.empty() && base.back() == '*');
    if (!base.empty() && base.back() == '*') {
      kinds_.push_back(Kind::kPointer);
    } else if (base == "int64_t" || base == "long") {
      kinds_.push_back(Kind::kInt64);
    } else if (base == "int32_t" || base == "int") {
      kinds_.push_back(Kind::kInt32);
    } else if (base == "bool") {
      kinds_.push_back(Kind::kBool);
    } else if (base == "double") {
      kinds_.push_back(Kind::kDouble);
    } else if (base == "float") {
      kinds_.push_back(Kind::kFloat);
    } else {
      TORCH_CHECK(false, "foo: compiled kernel ", name_, " has a parameter of unsupported type '", type, "'");
    }
  }
}

void CompiledKernel::launch(std::vector<Argument>&& arguments) const {
  TORCH_CHECK(arguments.size() == kinds_.size(), "foo: compiled kernel ", name_, " takes ", kinds_.size(),
              " arguments, got ", arguments.size());
  // The device: the one of the foo tensors, all on the same device (as any foo operator requires).
  c10::DeviceIndex device = -1;
  for (const Argument& a : arguments) {
    if (!a.tensor.defined() || a.tensor.device().type() != c10::DeviceType::PrivateUse1) continue;
    if (device < 0) {
      device = a.tensor.device().index();
    } else if (a.tensor.device().index() != device) {
      raiseMixedDevices(name_.c_str(), fooDevice(device), a.tensor.device());
    }
  }
  if (device < 0) device = currentDevice();

  // One slot per parameter, then two per scalar CPU tensor: the kernel reads its copy, as a CUDA kernel
  // reads a scalar passed by value, so a later change of the CPU tensor does not reach a queued kernel.
  size_t cpu_scalars = 0;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    if (kinds_[i] == Kind::kPointer) {
      const at::Tensor& t = arguments[i].tensor;
      TORCH_CHECK(t.defined(), "foo: compiled kernel ", name_, ": argument ", i, " must be a tensor");
      if (t.device().type() != c10::DeviceType::PrivateUse1) {
        if (t.device().type() != c10::kCPU || t.dim() != 0 || t.element_size() > 16) {
          raiseMixedDevices(name_.c_str(), fooDevice(device), t.device());
        }
        ++cpu_scalars;
      }
    }
  }
  std::vector<uint64_t> slots(kinds_.size() + 2 * cpu_scalars);
  c10::SmallVector<std::pair<size_t, size_t>, 2> scalar_slots;  // (parameter, slot of its value)
  size_t next_value = kinds_.size();
  for (size_t i = 0; i < kinds_.size(); ++i) {
    const Argument& a = arguments[i];
    switch (kinds_[i]) {
      case Kind::kPointer:
        if (a.tensor.device().type() == c10::DeviceType::PrivateUse1) {
          // Nothing is held: the caching allocator reuses freed memory in stream order and gives it back to
          // the runtime only after the device finished its work, as for operators' launches (holding the
          // storages would keep a tensor alive past its last use: graph trees see storages' use counts).
          slots[i] = reinterpret_cast<uint64_t>(fooKernelAddress(a.tensor.const_data_ptr()));
        } else {
          std::memcpy(&slots[next_value], a.tensor.const_data_ptr(), a.tensor.element_size());
          scalar_slots.emplace_back(i, next_value);
          next_value += 2;
        }
        break;
      case Kind::kInt64:
        slots[i] = static_cast<uint64_t>(a.integer);
        break;
      case Kind::kInt32: {
        const int32_t value = static_cast<int32_t>(a.integer);
        std::memcpy(&slots[i], &value, sizeof(value));
        break;
      }
      case Kind::kBool:
        slots[i] = a.integer != 0;
        break;
      case Kind::kDouble: {
        const double value = a.is_floating ? a.floating : static_cast<double>(a.integer);
        std::memcpy(&slots[i], &value, sizeof(value));
        break;
      }
      case Kind::kFloat: {
        const float value = static_cast<float>(a.is_floating ? a.floating : static_cast<double>(a.integer));
        std::memcpy(&slots[i], &value, sizeof(value));
        break;
      }
    }
  }
  if (sanitizer::enabled()) {
    sanitizer::LaunchAccesses accesses;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      if (kinds_[i] == Kind::kPointer) accesses.add(arguments[i].tensor, writes_[i]);
    }
    accesses.check(device, name_.c_str());
  }
  enqueueOnStream(device, name_.c_str(), [entry = entry_, slots = std::move(slots), scalar_slots]() mutable {
    for (const auto& [parameter, value] : scalar_slots) slots[parameter] = reinterpret_cast<uint64_t>(&slots[value]);
    entry(slots.data());
  });
}

}  // namespace foo
