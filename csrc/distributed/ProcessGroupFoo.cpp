#include "distributed/ProcessGroupFoo.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/empty.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>

#include "device/CachingAllocator.h"
#include "device/Common.h"
#include "device/Launch.h"
#include "device/Sanitizer.h"
#include "execution/KernelViews.h"

namespace foo {

static uint64_t launchCount(const FooStream& stream) {
  uint64_t count = 0;
  FOO_CHECK(fooStreamGetLaunchCount(stream.device, stream.id, &count));
  return count;
}

// The callers' streams whose queued work the communication stream is already ordered after: each with
// its launch count at that point (unchanged, it received nothing since). A collective issued from such
// a stream needs no wait for it. This is the loop of DDP and of most training steps: a stream that
// waited for the previous collective and issues the next; without this, the two streams would wait
// for each other at every collective, two thread hand-offs on the simulated device.
class OrderedCallers {
 public:
  bool contains(const FooStream& caller) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = counts_.find(key(caller));
    return found != counts_.end() && found->second == launchCount(caller);
  }
  void remember(const FooStream& caller, uint64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_[key(caller)] = count;
  }

 private:
  static int64_t key(const FooStream& s) { return static_cast<int64_t>(s.id) * FOO_MAX_DEVICES + s.device; }

  std::mutex mutex_;
  std::unordered_map<int64_t, uint64_t> counts_;
};

namespace {

using c10d::OpType;

// What the communication stream learns about one collective, for the host that issued it.
struct LaunchState {
  std::mutex mutex;
  std::exception_ptr error;
  c10::intrusive_ptr<c10d::Work> pending;  // a point-to-point operation under way in gloo

  // Runs `step` on a stream worker; its exception is the collective's failure and the device's
  // asynchronous error.
  template <class Step>
  void run(Step&& step) {
    try {
      step();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      throw;
    }
  }
  std::exception_ptr failure() {
    std::lock_guard<std::mutex> lock(mutex);
    return error;
  }
};

// A collective on foo tensors, as WorkNCCL: done when the event recorded after it on the communication
// stream completes; waiting orders the caller's current stream after it and leaves the host free.
class FooWork : public c10d::Work {
 public:
  FooWork(int rank, OpType type, c10::Device device, std::vector<at::Tensor> outputs,
          std::shared_ptr<LaunchState> state, bool blocks_host)
      : Work(rank, type), device_(device), outputs_(std::move(outputs)), state_(std::move(state)),
        blocks_host_(blocks_host) {}

  // For a collective that ends on the communication stream: the caller's stream and its launch count
  // after the collective was issued. A wait for it that is the only work the stream got since leaves
  // the stream ordered before the communication stream's tail.
  void trackCaller(std::shared_ptr<OrderedCallers> ordered, const FooStream& caller) {
    ordered_ = std::move(ordered);
    caller_ = caller;
    caller_count_ = launchCount(caller);
  }

  // Marks the end of the collective on `stream`: the event, and the future DDP's reducer and comm hooks
  // chain on (completed now, with events on `stream` that its users' streams wait for, as NCCL's is).
  void recordEnd(const FooStream& stream) {
    done_.record(stream.unwrap());
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(), std::vector<c10::Device>{device_});
    c10::StreamGuard on_stream(stream.unwrap());
    future_->markCompleted(c10::IValue(outputs_));
  }

  bool isCompleted() override { return done_.query(); }
  bool isSuccess() const override { return done_.query() && !state_->failure(); }
  std::exception_ptr exception() const override { return state_->failure(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void blockCurrentStream() override {
    const FooStream current = FooStream::current(device_.index());
    const uint64_t before = ordered_ ? launchCount(current) : 0;
    done_.block(current.unwrap());  // queues a wait, or nothing if the collective is done
    if (ordered_ && current.id == caller_.id && before == caller_count_) {
      const uint64_t after = launchCount(current);
      if (after <= before + 1) ordered_->remember(current, after);
    }
  }
  void synchronize() override { blockCurrentStream(); }

  bool wait(std::chrono::milliseconds /*timeout: gloo enforces the group's*/) override {
    blockCurrentStream();
    // A barrier returns with the caller's stream drained up to it, as NCCL's does.
    if (blocks_host_) FooStream::current(device_.index()).unwrap().synchronize();
    // A failure is the device's asynchronous error (raised once, here or at its next synchronization).
    if (done_.query() && state_->failure()) checkAsyncErrors(device_.index());
    return true;
  }

 private:
  c10::Device device_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<LaunchState> state_;
  bool blocks_host_;
  std::shared_ptr<OrderedCallers> ordered_;  // null: not tracked
  FooStream caller_{};
  uint64_t caller_count_ = 0;
  c10::Event done_{c10::DeviceType::PrivateUse1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// What gloo runs on: kernel views of foo tensors (the device memory itself), CPU tensors as they are.
at::Tensor glooView(const at::Tensor& t) { return t.is_privateuseone() ? kernelView(t) : t; }

std::vector<at::Tensor> glooViews(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) views.push_back(glooView(t));
  return views;
}

std::vector<std::vector<at::Tensor>> glooViews(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> views;
  views.reserve(lists.size());
  for (const auto& list : lists) views.push_back(glooViews(list));
  return views;
}

std::vector<at::Tensor> flatten(const std::vector<at::Tensor>& first, const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all(first);
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

// Gloo has no PREMUL_SUM: the collective scales its inputs by the factor, then sums. It holds no
// tensor of the caller's (a queued kernel must not hold Python objects: it may be destroyed on a
// stream worker, which cannot take the GIL from a host thread that waits for that stream). A factor tensor
// on foo is read through its kernel view when the collective runs, after the work queued before it.
class Premultiply {
 public:
  explicit Premultiply(const c10d::ReduceOp& op) : active_(op == c10d::ReduceOp::PREMUL_SUM) {
    if (!active_) return;
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "ReduceOp.PREMUL_SUM needs its factor (torch.distributed._make_nccl_premul_sum)");
    if (supplement->tensor_factor.defined() && supplement->tensor_factor.is_privateuseone()) {
      factor_view_ = kernelView(supplement->tensor_factor);
    } else if (supplement->tensor_factor.defined()) {
      value_ = supplement->tensor_factor.item<double>();
    } else {
      value_ = supplement->double_factor;
    }
  }

  // The options gloo runs with: SUM in place of PREMUL_SUM (which also drops the caller's factor tensor).
  template <class Options>
  Options forGloo(Options opts) const {
    if (active_) opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
    return opts;
  }
  // The tensors the collective reads, with the factor if it is a foo tensor.
  static std::vector<at::Tensor> withFactor(std::vector<at::Tensor> tensors, const c10d::ReduceOp& op) {
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (supplement != nullptr && supplement->tensor_factor.defined() && supplement->tensor_factor.is_privateuseone())
      tensors.push_back(supplement->tensor_factor);
    return tensors;
  }
  // Scales the buffers gloo sums: in place where the collective overwrites them anyway (all_reduce,
  // reduce), else a copy, so the caller's input stays as it was (reduce-scatters).
  void inPlace(std::vector<at::Tensor>& views) const {
    if (active_) for (auto& v : views) v.mul_(factor());
  }
  void onCopy(at::Tensor& view) const {
    if (active_) view = view.mul(factor());
  }

 private:
  c10::Scalar factor() const { return factor_view_.defined() ? factor_view_.item() : c10::Scalar(value_); }

  bool active_;
  double value_ = 1.0;
  at::Tensor factor_view_;
};

// The one device the tensors of a collective are on; CPU if they are all CPU tensors.
c10::Device commonDevice(const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "fccl: a collective needs at least one tensor");
  const c10::Device device = tensors.front().device();
  for (const auto& t : tensors) {
    TORCH_CHECK(t.device() == device, "fccl: the tensors of one collective must be on one device, got ", device,
                " and ", t.device());
    TORCH_CHECK(t.layout() == c10::kStrided, "fccl: tensors must be dense (strided), got ", t.layout());
    TORCH_CHECK(device.is_cpu() || t.is_non_overlapping_and_dense(), "fccl: tensors must be contiguous");
  }
  TORCH_CHECK(device.is_cpu() || device.is_privateuseone(), "fccl: tensors must be on foo or cpu, got ", device);
  return device;
}

// Gloo's checks of sizes, run on the host before anything is queued, so the call that caused an error
// raises it (as ProcessGroupNCCL checks), not the next synchronization.
void checkSameKind(const at::Tensor& t, const at::Tensor& like, const char* op) {
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "fccl: ", op, ": tensors must have one dtype, got ",
              t.scalar_type(), " and ", like.scalar_type());
}

void checkOnePerRank(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, int size,
                     const char* op) {
  TORCH_CHECK(lists.size() == 1, "fccl: ", op, ": expects one tensor list (one device per process)");
  TORCH_CHECK(static_cast<int>(lists[0].size()) == size, "fccl: ", op, ": the tensor list must have one tensor per rank (",
              size, "), got ", lists[0].size());
  for (const auto& t : lists[0]) {
    checkSameKind(t, like, op);
    TORCH_CHECK(t.numel() == like.numel(), "fccl: ", op, ": every tensor of the list must have ", like.numel(),
                " elements, got ", t.numel());
  }
}

void checkSplits(const std::vector<int64_t>& splits, const at::Tensor& t, int size, const char* which) {
  if (splits.empty()) {
    TORCH_CHECK(t.dim() > 0 && t.size(0) % size == 0, "fccl: all_to_all_single: the ", which,
                " tensor's first dimension must divide by the world size (", size, ") when no split sizes are given");
    return;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "fccl: all_to_all_single: ", which, " split sizes must have ",
              size, " entries, got ", splits.size());
  int64_t total = 0;
  for (int64_t n : splits) total += n;
  TORCH_CHECK(t.dim() > 0 && total == t.size(0), "fccl: all_to_all_single: ", which, " split sizes add up to ", total,
              ", but the ", which, " tensor's first dimension is ", t.dim() > 0 ? t.size(0) : 0);
}

// A dense tensor as one dimension in memory order, as NCCL sees a single-tensor collective's buffer.
at::Tensor flat(const at::Tensor& view) {
  return view.dim() == 1 ? view : view.as_strided({view.numel()}, {1});
}

template <class Kernel>
void enqueueOn(const FooStream& stream, const std::string& name, Kernel&& kernel) {
  c10::StreamGuard on_stream(stream.unwrap());
  enqueueOnStream(stream.device, name.c_str(), std::forward<Kernel>(kernel));
}

}  // namespace


ProcessGroupFoo::ProcessGroupFoo(c10::intrusive_ptr<c10d::Backend> device_gloo,
                                 c10::intrusive_ptr<c10d::Backend> host_gloo, int rank, int size,
                                 std::chrono::milliseconds timeout)
    : Backend(rank, size),
      device_gloo_(std::move(device_gloo)),
      host_gloo_(std::move(host_gloo)),
      timeout_(timeout),
      ordered_callers_(std::make_shared<OrderedCallers>()) {
  TORCH_CHECK(device_gloo_ && host_gloo_, "fccl: needs two gloo groups");
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFoo::getBackendOptions() {
  return c10::make_intrusive<Options>(kName, timeout_);
}

FooStream ProcessGroupFoo::commStream(c10::DeviceIndex device, bool point_to_point) {
  const int key = device * 2 + (point_to_point ? 1 : 0);
  auto found = streams_.find(key);
  if (found != streams_.end()) return found->second;
  fooStream_t stream = 0;
  FOO_CHECK(fooStreamCreate(device, &stream, 0));
  return streams_.emplace(key, FooStream{device, stream}).first->second;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::launch(OpType type, const std::vector<at::Tensor>& tensors,
                                                       std::vector<at::Tensor> outputs, GlooStart start,
                                                       bool async_op, Completion completion) {
  const c10::Device device = commonDevice(tensors);
  if (device.is_cpu()) {
    auto work = start(*host_gloo_);
    if (!async_op) work->wait();
    return work;
  }
  std::lock_guard<std::mutex> lock(mutex_);  // one issue order for every thread and stream
  const c10::DeviceIndex index = device.index();
  const FooStream comm = commStream(index, false);
  const FooStream caller = FooStream::current(index);
  // Under the sanitizer always: a call foo ran at once on the caller's stream counts no launch, but is one
  // (CUDA would have queued it) that the sanitizer must see the collective ordered after.
  if (sanitizer::enabled() || !ordered_callers_->contains(caller)) {
    c10::Event after_caller(c10::DeviceType::PrivateUse1);
    after_caller.record(caller.unwrap());
    after_caller.block(comm.unwrap());
  }

  auto state = std::make_shared<LaunchState>();
  const bool point_to_point = completion == Completion::PointToPoint;
  const std::string kernel_name = "fccl:" + c10d::opTypeToString(type);  // as NCCL's kernels show in a profile
  if (sanitizer::enabled()) {
    // The collective reads its inputs and writes its outputs on the communication stream.
    c10::StreamGuard on_comm(comm.unwrap());
    sanitizer::LaunchAccesses accesses;
    for (const at::Tensor& t : tensors) {
      accesses.add(t, std::any_of(outputs.begin(), outputs.end(), [&](const at::Tensor& out) {
        return out.defined() && t.defined() && out.storage().is_alias_of(t.storage());
      }));
    }
    accesses.check(index, kernel_name.c_str());
  }
  enqueueOn(comm, kernel_name, [start = std::move(start), gloo = device_gloo_, state, point_to_point] {
    state->run([&] {
      auto work = start(*gloo);
      if (point_to_point) {
        state->pending = std::move(work);
      } else {
        work->wait();
      }
    });
  });
  FooStream end = comm;
  if (point_to_point) {
    end = commStream(index, true);
    c10::Event started(c10::DeviceType::PrivateUse1);
    started.record(comm.unwrap());
    started.block(end.unwrap());
    enqueueOn(end, kernel_name + " (completion)", [state] {
      if (state->pending) state->run([&] { state->pending->wait(); });  // else it failed to start
    });
  }
  // As ProcessGroupNCCL does, the caching allocator keeps the tensors' memory from reuse until the
  // communication streams are done with it, even if the caller frees them first.
  for (const at::Tensor& t : tensors) {
    cachingAllocator().recordStream(t.storage().data_ptr(), comm.unwrap());
    if (point_to_point) cachingAllocator().recordStream(t.storage().data_ptr(), end.unwrap());
  }
  auto work = c10::make_intrusive<FooWork>(getRank(), type, device, std::move(outputs), state,
                                           completion == Completion::BlockHost);
  work->recordEnd(end);
  if (completion == Completion::Collective) work->trackCaller(ordered_callers_, caller);
  if (!async_op) work->synchronize();
  return work;
}

// Each collective makes its kernel views on the host, where the caller's tensors are; the queued start
// holds only the views (see Premultiply).

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  return launch(OpType::BROADCAST, tensors, tensors, [views = glooViews(tensors), opts](c10d::Backend& gloo) mutable {
    return gloo.broadcast(views, opts);
  }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const Premultiply premul(opts.reduceOp);
  return launch(OpType::ALLREDUCE, Premultiply::withFactor(tensors, opts.reduceOp), tensors,
                [views = glooViews(tensors), premul, opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  premul.inPlace(views);
                  return gloo.allreduce(views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceCoalescedOptions& opts) {
  const Premultiply premul(opts.reduceOp);
  return launch(OpType::ALLREDUCE_COALESCED, Premultiply::withFactor(tensors, opts.reduceOp), tensors,
                [views = glooViews(tensors), premul, opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  premul.inPlace(views);
                  return gloo.allreduce_coalesced(views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const Premultiply premul(opts.reduceOp);
  return launch(OpType::REDUCE, Premultiply::withFactor(tensors, opts.reduceOp), tensors,
                [views = glooViews(tensors), premul, opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  premul.inPlace(views);
                  return gloo.reduce(views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "fccl: all_gather: expects one input tensor (one device per process)");
  checkOnePerRank(outputs, inputs[0], getSize(), "all_gather");
  return launch(OpType::ALLGATHER, flatten(inputs, outputs), flatten({}, outputs),
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.allgather(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
  checkSameKind(output, input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "fccl: all_gather_into_tensor: the output must have world size (",
              getSize(), ") times the input's ", input.numel(), " elements, got ", output.numel());
  return launch(OpType::_ALLGATHER_BASE, {input, output}, {output},
                [output_view = flat(glooView(output)), input_view = flat(glooView(input)), opts](c10d::Backend& gloo) mutable {
                  return gloo._allgather_base(output_view, input_view, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                    std::vector<at::Tensor>& inputs,
                                                                    const c10d::AllgatherOptions& opts) {
  return launch(OpType::ALLGATHER_COALESCED, flatten(inputs, outputs), flatten({}, outputs),
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.allgather_coalesced(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::AllgatherOptions& opts) {
  return launch(OpType::COALESCED, flatten(inputs, {outputs}), outputs,
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.allgather_into_tensor_coalesced(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
  return launch(OpType::GATHER, flatten(inputs, outputs), flatten({}, outputs),
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.gather(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
  return launch(OpType::SCATTER, flatten(outputs, inputs), outputs,
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.scatter(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "fccl: reduce_scatter: expects one output tensor (one device per process)");
  checkOnePerRank(inputs, outputs[0], getSize(), "reduce_scatter");
  const Premultiply premul(opts.reduceOp);
  return launch(OpType::REDUCE_SCATTER, Premultiply::withFactor(flatten(outputs, inputs), opts.reduceOp), outputs,
                [output_views = glooViews(outputs), input_views = glooViews(inputs), premul,
                 opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  for (auto& list : input_views)
                    for (auto& view : list) premul.onCopy(view);
                  return gloo.reduce_scatter(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  const Premultiply premul(opts.reduceOp);
  checkSameKind(output, input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "fccl: reduce_scatter_tensor: the input must have world size (",
              getSize(), ") times the output's ", output.numel(), " elements, got ", input.numel());
  return launch(OpType::_REDUCE_SCATTER_BASE, Premultiply::withFactor({input, output}, opts.reduceOp), {output},
                [output_view = flat(glooView(output)), input_view = flat(glooView(input)), premul,
                 opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  premul.onCopy(input_view);
                  return gloo._reduce_scatter_base(output_view, input_view, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::ReduceScatterOptions& opts) {
  const Premultiply premul(opts.reduceOp);
  return launch(OpType::COALESCED, Premultiply::withFactor(flatten(inputs, {outputs}), opts.reduceOp), outputs,
                [output_views = glooViews(outputs), input_views = glooViews(inputs), premul,
                 opts = premul.forGloo(opts)](c10d::Backend& gloo) mutable {
                  for (auto& view : input_views) premul.onCopy(view);
                  return gloo.reduce_scatter_tensor_coalesced(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_split_sizes,
                                                              std::vector<int64_t>& input_split_sizes,
                                                              const c10d::AllToAllOptions& opts) {
  checkSameKind(output, input, "all_to_all_single");
  checkSplits(output_split_sizes, output, getSize(), "output");
  checkSplits(input_split_sizes, input, getSize(), "input");
  return launch(OpType::ALLTOALL_BASE, {input, output}, {output},
                [output_view = glooView(output), input_view = glooView(input), output_split_sizes,
                 input_split_sizes, opts](c10d::Backend& gloo) mutable {
                  return gloo.alltoall_base(output_view, input_view, output_split_sizes, input_split_sizes, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  return launch(OpType::ALLTOALL, flatten(inputs, {outputs}), outputs,
                [output_views = glooViews(outputs), input_views = glooViews(inputs), opts](c10d::Backend& gloo) mutable {
                  return gloo.alltoall(output_views, input_views, opts);
                }, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  return launch(OpType::SEND, tensors, tensors, [views = glooViews(tensors), dst_rank, tag](c10d::Backend& gloo) mutable {
    return gloo.send(views, dst_rank, tag);
  }, true, Completion::PointToPoint);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  return launch(OpType::RECV, tensors, tensors, [views = glooViews(tensors), src_rank, tag](c10d::Backend& gloo) mutable {
    return gloo.recv(views, src_rank, tag);
  }, true, Completion::PointToPoint);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  // As with NCCL, a foo tensor needs a named source; CPU tensors go to gloo, which can take any.
  TORCH_CHECK(commonDevice(tensors).is_cpu(), "fccl: receiving foo tensors from any source is not supported (as with "
              "NCCL): pass src");
  return host_gloo_->recvAnysource(tensors, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFoo::barrier(const c10d::BarrierOptions& opts) {
  // Like NCCL's, a barrier on foo also waits for the device: the host returns once every rank reached it
  // with the work it queued before.
  c10::DeviceIndex device = currentDevice();
  if (opts.device.has_value() && opts.device->is_privateuseone() && opts.device->has_index()) {
    device = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    device = static_cast<c10::DeviceIndex>(opts.device_ids.front());
  }
  at::Tensor marker = at::empty({0}, at::TensorOptions().device(fooDevice(device)));
  return launch(OpType::BARRIER, {marker}, {}, [opts](c10d::Backend& gloo) { return gloo.barrier(opts); }, opts.asyncOp,
                Completion::BlockHost);
}

// Host-side operations: the host group.
void ProcessGroupFoo::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  host_gloo_->monitoredBarrier(opts, wait_all_ranks);
}

void ProcessGroupFoo::setSequenceNumberForGroup() { host_gloo_->setSequenceNumberForGroup(); }

uint64_t ProcessGroupFoo::getSequenceNumberForGroup() { return host_gloo_->getSequenceNumberForGroup(); }

}  // namespace foo
