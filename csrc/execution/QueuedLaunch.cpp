#include "execution/QueuedLaunch.h"

#include <c10/core/StorageImpl.h>

#include "device/CachingAllocator.h"
#include "device/Generator.h"

namespace foo {
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
  for (size_t i = 0; matches && i < outputs_.size(); ++i)
    // Against the launch's own copy of the plan's layouts: the worker reads nothing of the plan itself,
    // whose reference count the host changes at every launch (a cache line both would write).
    matches = !outputs_[i].fresh || (results[i].defined() && outputs_[i].spec.layout.describes(results[i]));
  if (!matches) {
    plan_->stale = true;
    TORCH_CHECK(false, op_name_, " returned outputs of other shapes than an earlier call with the same arguments: "
                "its outputs depend on its inputs' values, and it will run synchronously from now on");
  }
  // Results the kernel did not write in place may sit in another output's memory (it allocated them
  // in another order): they are all taken out before any is copied to its output.
  c10::SmallVector<size_t, 4> misplaced;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].fresh && results[i].storage().data() != outputs_[i].spec.data) misplaced.push_back(i);
  }
  if (misplaced.size() > 1) {
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
