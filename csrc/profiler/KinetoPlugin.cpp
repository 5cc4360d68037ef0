// foo's device timeline in torch.profiler: a Kineto activity profiler, registered through the plugin point
// PyTorch's profiler offers a PrivateUse1 device's tracer (PrivateUse1ProfilerRegistry; CUPTI plays this
// part for CUDA). Each session turns on the
// runtime's activity tracing and hands Kineto what it recorded: the kernels and copies the streams ran,
// with their device-side times, one row per stream, each linked to the operator that launched it, and
// the host-side launch calls, joined to their work by flow arrows.
//
// Kineto's GenericTraceActivity formats its metadata with fmt, which libtorch does not export: use fmt
// header-only here, before anything includes it.
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

// libtorch is built with Kineto; its PrivateUse1 registry is declared only then.
#define USE_KINETO 1
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <unistd.h>

#include <limits>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "profiler/Profiler.h"
#include "runtime/foo_runtime.h"

namespace foo {
namespace {

using libkineto::ActivityType;

libkineto::ActivityType activityType(fooActivityKind kind) {
  switch (kind) {
    case fooActivityKindKernel:
      return ActivityType::CONCURRENT_KERNEL;
    case fooActivityKindMemcpy:
      return ActivityType::GPU_MEMCPY;
    case fooActivityKindRuntime:
      break;
  }
  return ActivityType::PRIVATEUSE1_RUNTIME;
}

const std::set<ActivityType>& fooActivityTypes() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                            ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

class FooProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  // A profile of the CPU asks for the launch calls only (PRIVATEUSE1_RUNTIME counts as a CPU activity, as
  // CUDA_RUNTIME does for CUDA); one of the device (ProfilerActivity.PrivateUse1) for the work too.
  explicit FooProfilerSession(std::set<ActivityType> requested) : requested_(std::move(requested)) {}

  void start() override {
    fooActivityEnable(1);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    fooActivityEnable(0);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, std::numeric_limits<int64_t>::max());
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback operator_of,
                    int64_t window_start, int64_t window_end) override {
    buffer_->span = libkineto::TraceSpan(window_start, window_end, "foo");
    window_ = {window_start, window_end};
    operator_of_ = std::move(operator_of);
    fooActivityFlush([](const fooActivityRecord* record, void* self) {
      static_cast<FooProfilerSession*>(self)->add(*record);
    }, this);
    for (const auto& activity : buffer_->activities) activity->log(logger);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::unique_ptr<libkineto::DeviceInfo>(new libkineto::DeviceInfo{0, 0, "foo", "foo"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> rows;
    for (const auto& [device, stream] : streams_) {
      rows.push_back(libkineto::ResourceInfo{stream, stream, device,
                                             "foo:" + std::to_string(device) + " stream " + std::to_string(stream)});
    }
    return rows;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  // The profiler's id of the operator running on this thread: the launches it makes carry it.
  void pushCorrelationId(uint64_t id) override { fooActivityPushExternalCorrelationId(id); }
  void popCorrelationId() override { fooActivityPopExternalCorrelationId(nullptr); }

 private:
  void add(const fooActivityRecord& record) {
    const ActivityType type = activityType(record.kind);
    if (requested_.count(type) == 0 || record.end_ns < window_.first || record.start_ns > window_.second) return;
    buffer_->emplace_activity(buffer_->span, type, record.name);
    libkineto::GenericTraceActivity& activity = *buffer_->activities.back();
    activity.startTime = record.start_ns;
    activity.endTime = record.end_ns;
    activity.id = static_cast<int32_t>(record.correlation_id);
    activity.threadId = static_cast<int32_t>(record.thread_id);
    const bool launch_call = record.kind == fooActivityKindRuntime;
    if (launch_call) {  // a host event: the launching thread's row
      activity.device = static_cast<int32_t>(getpid());
      activity.resource = static_cast<int32_t>(record.thread_id);
    } else {  // device work: its stream's row
      activity.device = record.device;
      activity.resource = static_cast<int32_t>(record.stream);
      streams_.insert({record.device, record.stream});
      activity.addMetadata("device", record.device);
      activity.addMetadata("stream", record.stream);
    }
    activity.addMetadata("correlation", record.correlation_id);
    if (record.external_id != 0 && operator_of_) {
      activity.linked = operator_of_(static_cast<int32_t>(record.external_id));
    }
    activity.flow.id = static_cast<uint32_t>(record.correlation_id);
    activity.flow.type = libkineto::kLinkAsyncCpuGpu;
    activity.flow.start = launch_call;
  }

  const std::set<ActivityType> requested_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  std::pair<int64_t, int64_t> window_;
  libkineto::getLinkedActivityCallback operator_of_;
  std::set<std::pair<int, fooStream_t>> streams_;
};

class FooActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "foo";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override { return fooActivityTypes(); }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& requested,
                                                                 const libkineto::Config&) override {
    std::set<ActivityType> ours;
    for (ActivityType type : requested)
      if (fooActivityTypes().count(type) > 0) ours.insert(type);
    if (ours.empty()) return nullptr;
    return std::make_unique<FooProfilerSession>(std::move(ours));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& requested,
                                                                 const libkineto::Config& config) override {
    return configure(requested, config);
  }
};

}  // namespace

void registerProfiler() {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::make_unique<FooActivityProfiler>(); });
}

}  // namespace foo
