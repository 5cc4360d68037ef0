// torch.foo.memory._snapshot()'s dictionary, the one torch.cuda.memory._snapshot() returns and PyTorch's memory
// visualiser reads, from the caching allocator's snapshot (device/AllocatorHistory.cpp).
#include "bindings/MemorySnapshot.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

// Declared in torch/csrc/profiler/python/combined_traceback.h, whose includes (nlohmann's JSON) the wheel lacks.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace foo {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

const char* actionName(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
  }
  return "unknown";
}

}  // namespace

pybind11::dict snapshotToPython(const CachingAllocator::Snapshot& snapshot) {
  std::vector<torch::CapturedTraceback*> stacks;
  std::unordered_map<const c10::GatheredContext*, size_t> stack_index;
  auto collect = [&](const std::shared_ptr<c10::GatheredContext>& context) {
    if (context && stack_index.emplace(context.get(), stacks.size()).second) {
      stacks.push_back(static_cast<torch::CapturedTraceback*>(context.get()));
    }
  };
  for (const auto& segment : snapshot.segments)
    for (const auto& block : segment.blocks) collect(block.context_when_allocated);
  for (const auto& trace : snapshot.device_traces)
    for (const auto& entry : trace) collect(entry.context_);
  const std::vector<pybind11::object> frames = torch::py_symbolize(stacks);
  auto frames_of = [&](const std::shared_ptr<c10::GatheredContext>& context) -> pybind11::object {
    return context ? frames[stack_index.at(context.get())] : pybind11::list();
  };

  pybind11::list segments;
  for (const auto& segment : snapshot.segments) {
    pybind11::list blocks;
    size_t address = segment.address;
    for (const auto& block : segment.blocks) {
      pybind11::dict b;
      b["address"] = address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.allocated ? "active_allocated" : block.active ? "active_pending_free" : "inactive";
      b["frames"] = frames_of(block.context_when_allocated);
      blocks.append(b);
      address += block.size;
    }
    pybind11::dict s;
    s["device"] = static_cast<int>(segment.device);
    s["address"] = segment.address;
    s["total_size"] = segment.total_size;
    s["allocated_size"] = segment.allocated_size;
    s["active_size"] = segment.active_size;
    s["requested_size"] = segment.requested_size;
    s["stream"] = reinterpret_cast<int64_t>(segment.stream);
    s["segment_type"] = segment.is_large ? "large" : "small";
    s["segment_pool_id"] = pybind11::make_tuple(segment.owner_private_pool_id.first, segment.owner_private_pool_id.second);
    s["is_expandable"] = false;
    s["frames"] = pybind11::list();
    s["blocks"] = blocks;
    segments.append(s);
  }
  pybind11::list device_traces;
  for (const auto& trace : snapshot.device_traces) {
    pybind11::list entries;
    for (const auto& entry : trace) {
      pybind11::dict e;
      e["action"] = actionName(entry.action_);
      e[entry.action_ == TraceEntry::OOM ? "device_free" : "addr"] = entry.addr_;
      e["size"] = entry.size_;
      e["stream"] = reinterpret_cast<int64_t>(entry.stream_);
      e["time_us"] = entry.time_.approx_t_;
      e["frames"] = frames_of(entry.context_);
      entries.append(e);
    }
    device_traces.append(entries);
  }
  pybind11::dict result;
  result["segments"] = segments;
  result["device_traces"] = device_traces;
  return result;
}

}  // namespace foo
