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

size_t hashOf(c10::ArrayRef<int64_t> words) {
  size_t h = words.size();
  for (int64_t w : words) h = h * 1000003u ^ static_cast<size_t>(w);
  return h;
}

// The plans learnt on this thread, by their signature's hash (a lookup builds no key).
struct LearntPlan {
  std::vector<int64_t> words;
  std::shared_ptr<LaunchPlan> plan;
};

// Per host thread (the autograd engine's threads learn their own): no locking on the hot path.
// Bounded: a program that keeps changing shapes only relearns.
constexpr size_t kMaxPlans = 4096;
thread_local std::unordered_multimap<size_t, LearntPlan> t_plans;

LearntPlan* findLearnt(c10::ArrayRef<int64_t> words, size_t hash) {
  auto [begin, end] = t_plans.equal_range(hash);
  for (auto it = begin; it != end; ++it)
    if (c10::ArrayRef<int64_t>(it->second.words) == words) return &it->second;
  return nullptr;
}

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
  const LearntPlan* found = findLearnt(signature.words(), hashOf(signature.words()));
  if (found == nullptr || found->plan->stale.load(std::memory_order_relaxed)) return nullptr;
  return found->plan;
}

void rememberLaunchPlan(const LaunchSignature& signature, std::shared_ptr<LaunchPlan> plan) {
  if (!signature.allowed()) return;
  const size_t hash = hashOf(signature.words());
  if (LearntPlan* learnt = findLearnt(signature.words(), hash)) {
    if (!learnt->plan->stale.load(std::memory_order_relaxed)) learnt->plan = std::move(plan);
    return;  // a stale plan stays: data-dependent after all, the signature stays synchronous
  }
  if (t_plans.size() >= kMaxPlans) t_plans.clear();
  t_plans.emplace(hash, LearntPlan{signature.words().vec(), std::move(plan)});
}

}  // namespace foo
