#include "execution/LaunchPlan.h"

#include <cstring>
#include <unordered_map>

namespace foo {
namespace {

int64_t bitsOf(double value) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

struct WordsHash {
  size_t operator()(const std::vector<int64_t>& words) const {
    size_t h = words.size();
    for (int64_t w : words) h = h * 1000003u ^ static_cast<size_t>(w);
    return h;
  }
};

// Per host thread (the autograd engine's threads learn their own): no locking on the hot path.
// Bounded: a program that keeps changing shapes only relearns.
constexpr size_t kMaxPlans = 4096;
thread_local std::unordered_map<std::vector<int64_t>, std::shared_ptr<LaunchPlan>, WordsHash> t_plans;

}  // namespace

void LaunchSignature::tensor(const at::Tensor& t, size_t slot, size_t storage_slot) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  word(kTensor, static_cast<int64_t>(t.scalar_type()));
  words_.push_back(static_cast<int64_t>(slot));
  words_.push_back(static_cast<int64_t>(storage_slot));
  words_.push_back(impl->storage_offset());
  words_.push_back((impl->is_conj() ? 1 : 0) | (impl->is_neg() ? 2 : 0));
  words_.push_back(impl->dim());
  for (int64_t s : impl->sizes()) words_.push_back(s);
  for (int64_t s : impl->strides()) words_.push_back(s);
}

void LaunchSignature::add(double value) { word(kDouble, bitsOf(value)); }

template <class T>
void LaunchSignature::addList(const c10::List<T>& values) {
  word(kList, static_cast<int64_t>(values.size()));
  for (T v : values) add(v);
}

void LaunchSignature::add(const c10::SymInt& value) {
  if (value.is_heap_allocated()) {
    forbid();
  } else {
    add(value.as_int_unchecked());
  }
}

void LaunchSignature::add(const c10::Scalar& value) {
  if (value.isComplex()) {
    const c10::complex<double> z = value.toComplexDouble();
    word(kComplex, bitsOf(z.real()));
    words_.push_back(bitsOf(z.imag()));
  } else if (value.isFloatingPoint()) {
    add(value.toDouble());
  } else if (value.isBoolean()) {
    add(value.toBool());
  } else if (value.isIntegral(/*includeBool=*/false) && !value.isSymbolic()) {
    add(value.toLong());
  } else {
    forbid();
  }
}

void LaunchSignature::add(c10::IntArrayRef values) {
  word(kList, static_cast<int64_t>(values.size()));
  for (int64_t v : values) words_.push_back(v);
}

void LaunchSignature::add(c10::SymIntArrayRef values) {
  word(kList, static_cast<int64_t>(values.size()));
  for (const c10::SymInt& v : values) add(v);
}

void LaunchSignature::add(at::OptionalIntArrayRef values) {
  if (values) {
    add(*values);
  } else {
    word(kNone);
  }
}

void LaunchSignature::add(std::string_view value) {
  word(kString, static_cast<int64_t>(value.size()));
  for (char c : value) words_.push_back(c);
}

void LaunchSignature::add(const c10::IValue& value) {
  if (value.isNone()) {
    word(kNone);
  } else if (value.isBool()) {
    add(value.toBool());
  } else if (value.isInt()) {
    add(value.toInt());
  } else if (value.isDouble()) {
    add(value.toDouble());
  } else if (value.isComplexDouble()) {
    add(c10::Scalar(value.toComplexDouble()));
  } else if (value.isSymInt()) {
    add(value.toSymInt());
  } else if (value.isString()) {
    add(std::string_view(value.toStringRef()));
  } else if (value.isIntList()) {
    addList(value.toIntList());
  } else if (value.isDoubleList()) {
    addList(value.toDoubleList());
  } else if (value.isBoolList()) {
    addList(value.toBoolList());
  } else if (value.isDevice()) {
    word(kDevice, static_cast<int64_t>(value.toDevice().type()) << 16 | (value.toDevice().index() + 1));
  } else {
    forbid();  // generators, objects, symbolic lists...: always synchronous
  }
}

std::shared_ptr<LaunchPlan> findLaunchPlan(const LaunchSignature& signature) {
  if (!signature.allowed()) return nullptr;
  auto found = t_plans.find(signature.words());
  if (found == t_plans.end() || found->second->stale.load(std::memory_order_relaxed)) return nullptr;
  return found->second;
}

void rememberLaunchPlan(const LaunchSignature& signature, std::shared_ptr<LaunchPlan> plan) {
  if (!signature.allowed()) return;
  if (t_plans.size() >= kMaxPlans) t_plans.clear();
  std::shared_ptr<LaunchPlan>& slot = t_plans[signature.words()];
  if (slot && slot->stale.load(std::memory_order_relaxed)) return;  // data-dependent after all: stays synchronous
  slot = std::move(plan);
}

}  // namespace foo
