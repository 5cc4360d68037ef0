// ProcessGroupFoo: the c10d backend for foo tensors ("fccl"), built on gloo groups over TCP.
//
// It behaves as ProcessGroupNCCL does on CUDA. A collective is issued on the group's own communication
// stream, after the work queued on the caller's current stream (it sees the values that work writes);
// gloo runs on kernel views of the device memory (no staging copy); Work.wait() makes the caller's
// current stream wait for the collective without blocking the host. One communication stream per
// device receives every collective of the group in the host's issue order, whatever stream issued it,
// so all ranks hand collectives to gloo in the same order. CPU tensors go to a second gloo group
// directly from the host, as beside NCCL ("cpu:gloo,cuda:nccl"): gloo pairs the ranks' collectives by
// the order they reach a group, and host and stream order differ.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device/Stream.h"

namespace foo {

class OrderedCallers;

class ProcessGroupFoo : public c10d::Backend {
 public:
  static constexpr const char* kName = "fccl";

  ProcessGroupFoo(c10::intrusive_ptr<c10d::Backend> device_gloo, c10::intrusive_ptr<c10d::Backend> host_gloo,
                  int rank, int size, std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return kName; }
  c10::intrusive_ptr<Options> getBackendOptions() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  // How a collective reaches gloo: `start` hands it to the gloo group it is given and returns gloo's
  // work; for foo tensors it runs on the communication stream, on kernel views. A point-to-point start
  // returns at once and its completion is awaited on a second stream, so a send and the receive it
  // needs can both be under way.
  enum class Completion { Collective, PointToPoint, BlockHost };
  using GlooStart = std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& gloo)>;
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const std::vector<at::Tensor>& tensors,
                                        std::vector<at::Tensor> outputs, GlooStart start, bool async_op,
                                        Completion completion = Completion::Collective);
  FooStream commStream(c10::DeviceIndex device, bool point_to_point);

  c10::intrusive_ptr<c10d::Backend> device_gloo_;  // collectives on foo tensors, from the streams
  c10::intrusive_ptr<c10d::Backend> host_gloo_;    // collectives on CPU tensors, from the host
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // issue order and the streams below
  std::unordered_map<int, FooStream> streams_;  // key: device * 2 + point_to_point
  std::shared_ptr<OrderedCallers> ordered_callers_;
};

}  // namespace foo
