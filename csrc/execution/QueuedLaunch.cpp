#include "execution/QueuedLaunch.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e4m3fnuz.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Float8_e5m2fnuz.h>
#include <c10/util/overflows.h>

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "device/CachingAllocator.h"
#include "device/Generator.h"
#include "execution/HostKernel.h"

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

// Values by a sequence of words (a call's signature, a kernel key), found by their hash (a lookup builds no
// key). One per host thread (the autograd engine's threads learn their own): no locking on the hot path.
// Bounded: a program that keeps changing shapes only learns again.
template <class Value, size_t kMaxEntries>
class WordTable {
 public:
  Value* find(c10::ArrayRef<int64_t> words) {
    auto [begin, end] = entries_.equal_range(hashOf(words));
    for (auto it = begin; it != end; ++it)
      if (c10::ArrayRef<int64_t>(it->second.words) == words) return &it->second.value;
    return nullptr;
  }
  void clear() { entries_.clear(); }
  // For words not in the table.
  void insert(c10::ArrayRef<int64_t> words, Value value) {
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace(hashOf(words), Entry{words.vec(), std::move(value)});
  }

 private:
  struct Entry {
    std::vector<int64_t> words;
    Value value;
  };
  std::unordered_multimap<size_t, Entry> entries_;
};

thread_local WordTable<std::shared_ptr<LaunchPlan>, 4096> t_plans;
// The kernel keys that ran: far fewer than signatures in a program, kept longer.
thread_local WordTable<bool, 65536> t_kernels_ran;

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
  // An empty tensor that a kernel resizes gets new memory only if its storage has none (an empty out=).
  if (impl->numel() == 0) {
    const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    words_.push_back((storage->nbytes() == 0) | storage->resizable() << 1);
  }
}

namespace {

template <class... Dtypes, class Number>
int64_t convertibleTo(Number value) {
  int64_t bits = 0, bit = 1;
  ((bits |= c10::overflows<Dtypes, Number>(value) ? 0 : bit, bit <<= 1), ...);
  return bits;
}

// Which dtypes `value` converts to without overflow, one bit each: a kernel's conversion of a number raises
// only where it does not.
template <class Number>
int64_t convertibleDtypes(Number value) {
  return convertibleTo<uint8_t, int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t, c10::Half,
                       c10::BFloat16, float, c10::Float8_e5m2, c10::Float8_e4m3fn, c10::Float8_e5m2fnuz,
                       c10::Float8_e4m3fnuz>(value);
}

}  // namespace

void LaunchSignature::add(double value) {
  if (numbers_by_range_) {
    word(kDoubleRange, convertibleDtypes(value));
  } else {
    word(kDouble, bitsOf(value));
  }
}

bool numbersOnlyScale(std::string_view op_name) {
  static const std::unordered_set<std::string_view> names = {
      "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
      "aten::addcdiv", "aten::addcdiv_", "aten::addcmul", "aten::addcmul_", "aten::lerp", "aten::lerp_",
      "aten::fill_", "aten::clamp", "aten::clamp_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp_max",
      "aten::clamp_max_"};
  return names.count(op_name) != 0;
}

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

namespace {

// A strided tensor's dimension, each dimension's rank by decreasing stride, and which are broadcast (stride 0):
// what the layout of the outputs derived from it depends on. A dimension of size one keeps the stride it was
// made with (a batch of one sliced or made keeps the class of any other batch).
int64_t layoutClass(const c10::TensorImpl& t) {
  const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
  const size_t n = sizes.size();
  int64_t code = static_cast<int64_t>(n);
  if (n > 11) return code;  // 4 bits, then 5 per dimension: a rarer tensor's class is its dimension alone
  for (size_t i = 0; i < n; ++i) {
    int64_t rank = 0;
    for (size_t j = 0; j < n; ++j) rank += strides[j] > strides[i] || (strides[j] == strides[i] && j < i);
    const int64_t broadcast = sizes[i] != 1 && strides[i] == 0;
    code |= (rank | broadcast << 4) << (4 + 5 * i);
  }
  return code;
}

}  // namespace

void KernelKey::add(const at::Tensor& t) {
  if (!t.defined()) {
    words_.push_back(0);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  words_.push_back(4 * (static_cast<int64_t>(t.scalar_type()) + 1) + 2 * impl->is_wrapped_number() + (t.numel() == 0));
  if (t.layout() == c10::kStrided && !t.is_nested()) words_.push_back(layoutClass(*impl));
}

void KernelKey::add(const c10::Scalar& value) {
  words_.push_back(value.isComplex() ? -2 : value.isFloatingPoint() ? -3 : value.isBoolean() ? -4 : -5);
  // A number the kernel cannot convert raises: a call of a new shape with it runs at the call.
  if (value.isFloatingPoint()) {
    words_.push_back(convertibleDtypes(value.toDouble()));
  } else if (value.isIntegral(/*includeBool=*/false) && !value.isSymbolic()) {
    words_.push_back(convertibleDtypes(value.toLong()));
  }
}

void KernelKey::add(const c10::IValue& value) {
  if (value.isTensor()) {
    add(value.toTensor());
  } else if (value.isInt() || value.isBool()) {
    words_.push_back(value.isInt() ? value.toInt() : value.toBool());
  } else if (value.isDouble() || value.isComplexDouble()) {
    add(value.isDouble() ? c10::Scalar(value.toDouble()) : c10::Scalar(value.toComplexDouble()));
  } else if (value.isString()) {
    words_.push_back(static_cast<int64_t>(std::hash<std::string_view>()(value.toStringView())));
  } else if (value.isNone()) {
    words_.push_back(-1);
  }
}

bool kernelRan(const KernelKey& key) { return t_kernels_ran.find(key.words()) != nullptr; }

void noteKernelRan(const KernelKey& key) {
  if (!kernelRan(key)) t_kernels_ran.insert(key.words(), true);
}

std::shared_ptr<LaunchPlan> findLaunchPlan(const LaunchSignature& signature) {
  if (!signature.allowed()) return nullptr;
  const std::shared_ptr<LaunchPlan>* found = t_plans.find(signature.words());
  if (found == nullptr || (*found)->stale.load(std::memory_order_relaxed)) return nullptr;
  return *found;
}

bool rememberLaunchPlan(const LaunchSignature& signature, std::shared_ptr<LaunchPlan> plan) {
  if (!signature.allowed()) return false;
  if (std::shared_ptr<LaunchPlan>* learnt = t_plans.find(signature.words())) {
    // A stale plan stays: data-dependent after all (or misplanned), the signature stays synchronous.
    if ((*learnt)->stale.load(std::memory_order_relaxed)) return false;
    *learnt = std::move(plan);
    return true;
  }
  t_plans.insert(signature.words(), std::move(plan));
  return true;
}

void forgetLaunchPlans() { t_plans.clear(); }

// ---- The launch -----------------------------------------------------------------------------------------

namespace {

// A foo tensor with its own storage, as `spec` describes a fresh output.
at::Tensor freshOutput(const LaunchPlan::Output& spec, c10::DeviceIndex device) {
  const size_t nbytes = spec.layout.storage_nbytes;
  return spec.layout.fooTensor(c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                            cachingAllocator().allocateOn(device, nbytes), &cachingAllocator(),
                                            /*resizable=*/true));
}

}  // namespace

LaunchOutputs QueuedLaunch::queue(std::unique_ptr<QueuedLaunch> launch, HostKernelCall& call,
                                  std::shared_ptr<LaunchPlan> plan, bool views_on_worker) {
  const c10::DeviceIndex device = call.device_;
  if (sanitizer::enabled()) call.sanitizeArguments();
  for (const LaunchPlan::Resize& resize : plan->resized) {
    call.resizeAsPlanned(resize.argument, resize.layout);
    const HostKernelCall::Alias& a = call.aliases_[resize.argument];
    launch->resized_.push_back({resize.argument, KernelViewSpec(*a.foo), views_on_worker ? at::Tensor() : a.view});
  }
  LaunchOutputs outputs;
  outputs.reserve(plan->outputs.size());
  for (const LaunchPlan::Output& spec : plan->outputs) {
    if (spec.kind == LaunchPlan::Output::kArgument) {
      outputs.push_back(*call.aliases_[spec.argument].foo);
      launch->outputs_.emplace_back();
    } else if (spec.kind == LaunchPlan::Output::kFresh) {
      outputs.push_back(freshOutput(spec, device));
      launch->outputs_.push_back({true, KernelViewSpec(outputs.back())});
    } else {
      outputs.emplace_back();
      launch->outputs_.emplace_back();
    }
  }
  if (views_on_worker) {
    for (const HostKernelCall::Alias& a : call.aliases_) launch->inputs_.push_back({a.storage_slot, KernelViewSpec(*a.foo)});
    int capturing = 0;
    FOO_CHECK(fooStreamIsCapturing(device, currentStream(device), &capturing));
    if (capturing != 0) launch->kept_ = std::make_unique<KeptViews>();
  }
  if (sanitizer::enabled()) {
    // Memory allocated for this launch, which it writes.
    sanitizer::LaunchAccesses& accesses = call.sanitized();
    for (const LaunchPlan::Resize& resize : plan->resized) accesses.write(*call.aliases_[resize.argument].foo);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (plan->outputs[i].kind == LaunchPlan::Output::kFresh) accesses.write(outputs[i]);
    }
    accesses.record(device, call.op_name_);
  }
  launch->plan_from_meta_ = plan->from_meta;
  launch->plan_ = std::move(plan);
  launch->op_name_ = call.op_name_;
  const char* name = launch->kernelName();  // the plan, which holds it, outlives the launch call
  QueuedWork::enqueue(std::move(launch), device, name);
  if (call.draws_random_numbers_) noteLaunchedDraws(device, currentStream(device));
  return outputs;
}

void QueuedLaunch::run() {
  c10::impl::ForceDispatchKeyGuard same_keys_as_caller(keys_);
  c10::SmallVector<at::Tensor, 4> own_views;  // unless the launch keeps views across replays
  if (!kept_) own_views = makeInputViews();
  const c10::ArrayRef<at::Tensor> views = kept_ ? keptInputViews() : c10::ArrayRef<at::Tensor>(own_views);
  OutputHints hints;
  for (const Output& output : outputs_) {
    const size_t nbytes = output.spec.layout.storage_nbytes;
    if (output.fresh && nbytes > 0) hints.push_back({output.spec.data, nbytes});
  }
  // The worker's one results vector, reused from run to run (taken, in case a kernel runs another).
  static thread_local std::vector<at::Tensor> t_spare_results;
  std::vector<at::Tensor> results = std::move(t_spare_results);
  {
    OfferOutputHints offer(hints);
    runKernel(views, results);
  }
  bool matches = results.size() == outputs_.size();
  bool restrided = false;  // a meta plan's result of the planned sizes, with other strides
  for (size_t i = 0; matches && i < outputs_.size(); ++i) {
    // Against the launch's own copy of the plan's layouts: the worker reads nothing of the plan itself,
    // whose reference count the host changes at every launch (a cache line both would write).
    const TensorLayout& planned = outputs_[i].spec.layout;
    if (!outputs_[i].fresh || (results[i].defined() && planned.describes(results[i]))) continue;
    matches = plan_from_meta_ && results[i].defined() && results[i].dtype() == planned.dtype &&
              results[i].sizes() == planned.sizes();
    restrided = true;
  }
  for (const Resized& r : resized_) {
    const at::Tensor& view = r.caller_view.defined() ? r.caller_view : views[r.slot];
    matches = matches && view.storage().data() == r.spec.data && r.spec.layout.describes(view);
  }
  if (!matches || restrided) plan_->stale = true;
  TORCH_CHECK(matches, op_name_, " returned outputs of other shapes than an earlier call with the same arguments: "
              "its outputs depend on its inputs' values, and it will run synchronously from now on");
  // Results the kernel did not write in place, or wrote in other strides, are copied to their outputs. They
  // may sit in another output's memory (the kernel allocated them in another order), or in their own output's
  // memory in other strides: then they are all taken out before any is copied.
  c10::SmallVector<size_t, 4> misplaced;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].fresh && (results[i].storage().data() != outputs_[i].spec.data ||
                              (restrided && !outputs_[i].spec.layout.describes(results[i])))) {
      misplaced.push_back(i);
    }
  }
  if (misplaced.size() > 1 || restrided) {
    for (size_t i : misplaced) results[i] = results[i].clone();
  }
  for (size_t i : misplaced) kernelView(outputs_[i].spec).copy_(results[i]);
  results.clear();
  t_spare_results = std::move(results);
  for (at::Tensor& view : own_views) recycleKernelView(std::move(view));
}

c10::SmallVector<at::Tensor, 4> QueuedLaunch::makeInputViews() const {
  // This thread's own views, made from its pool (and given back to it after the run, unless kept).
  c10::SmallVector<at::Tensor, 4> views;
  for (size_t slot = 0; slot < inputs_.size(); ++slot) {
    const Input& input = inputs_[slot];
    views.push_back(kernelView(input.spec, input.storage_slot < slot ? views[input.storage_slot].storage() : c10::Storage()));
  }
  return views;
}

c10::ArrayRef<at::Tensor> QueuedLaunch::keptInputViews() {
  // Made by the first run; later ones share them, as kernels never change their inputs' views.
  if (!kept_->made.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(kept_->mutex);
    if (!kept_->made.load(std::memory_order_relaxed)) {
      kept_->views = makeInputViews();
      kept_->made.store(true, std::memory_order_release);
    }
  }
  return kept_->views;
}

}  // namespace foo
