"""torch.profiler on foo: a device timeline from foo's Kineto plugin (kernels and copies on their streams,
with the times the device ran them, linked to the operators that launched them), and the device-event
stubs behind torch.autograd.profiler.profile(use_device="foo").

No test depends on timing: where device time must differ from host time, a stream held until released
(torch.foo._hold_stream) forces the order.
"""
import json
import os
import re
import threading

import pytest
import torch
import torch._inductor.config as inductor_config
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def exported_trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def averages(prof):
    return {a.key: a for a in prof.key_averages()}


def test_private_use1_is_a_supported_activity_named_foo():
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()
    assert ProfilerActivity.PrivateUse1.name == "FOO"


def test_operators_get_the_device_time_of_the_kernels_they_launch():
    torch.manual_seed(0)
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    x_foo, w_foo = x.foo(), w.foo()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        host = torch.relu(x_foo @ w_foo + 1).cpu()
    torch.testing.assert_close(host, torch.relu(x @ w + 1))
    by_name = averages(prof)
    for op in ("aten::mm", "aten::add", "aten::relu"):
        kernel = by_name[f"{op} kernel"]
        assert kernel.device_type == DeviceType.PrivateUse1 and kernel.count == 1
        assert kernel.device_time_total > 0
        # The operator's own device time is its kernel's.
        assert by_name[op].self_device_time_total == pytest.approx(kernel.device_time_total)
    assert by_name["aten::matmul"].device_time_total == pytest.approx(by_name["aten::mm kernel"].device_time_total)
    copy = by_name["Memcpy DtoH (Device -> Pageable)"]
    assert copy.device_type == DeviceType.PrivateUse1 and copy.count == 1
    table = prof.key_averages().table(sort_by="self_device_time_total")
    assert "Self FOO" in table and "FOO total" in table


def test_kernels_of_queued_and_first_calls_are_both_recorded():
    """An operator's first call with a signature runs synchronously, later ones are queued: both are
    device work on the timeline."""
    x = torch.randn(7, 3, device="foo")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        for _ in range(3):
            x.tanh()
        torch.foo.synchronize()
    assert averages(prof)["aten::tanh kernel"].count == 3


def test_device_times_are_when_the_stream_ran_the_work(tmp_path):
    x = torch.ones(16, device="foo")
    x + 1  # a first call runs synchronously (it learns its signature): the next one is queued
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        with torch.foo._hold_stream():
            y = x + 1  # launched at once, run when the hold ends
        torch.foo.synchronize()
    assert y.cpu().eq(2).all()
    events = exported_trace(prof, tmp_path)
    hold = next(e for e in events if e.get("cat") == "kernel" and e["name"] == "_hold_stream")
    add = next(e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::add kernel")
    launch = next(e for e in events if e.get("cat") == "privateuse1_runtime"
                  and e["args"]["correlation"] == add["args"]["correlation"])
    assert launch["name"] == "fooLaunchKernel"
    assert launch["ts"] + launch["dur"] <= hold["ts"] + hold["dur"] <= add["ts"]
    # The launch call is on the host thread that made it, the operator's (whose events the profiler times
    # with its own clock: no comparison of times across the two).
    op = next(e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::add")
    assert (launch["pid"], launch["tid"]) == (os.getpid(), threading.get_native_id()) == (op["pid"], op["tid"])
    assert add["args"]["External id"] == op["args"]["External id"] == launch["args"]["External id"]


def test_exported_trace_has_a_row_per_stream_and_flows_from_launches_to_work(tmp_path):
    side = torch.foo.Stream(device=1)
    x = torch.arange(32.0, device="foo:1")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        doubled = x * 2
        with torch.foo.stream(side):
            side.wait_stream(torch.foo.default_stream(1))
            shifted = x + 1
        torch.foo.synchronize(1)
    assert doubled.cpu().equal(torch.arange(32.0) * 2) and shifted.cpu().equal(torch.arange(32.0) + 1)
    events = exported_trace(prof, tmp_path)
    kernels = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    mul, add = kernels["aten::mul kernel"], kernels["aten::add kernel"]
    assert (mul["pid"], mul["tid"], mul["args"]["device"], mul["args"]["stream"]) == (1, 0, 1, 0)
    assert (add["pid"], add["tid"], add["args"]["device"], add["args"]["stream"]) == (1, side.stream_id, 1,
                                                                                       side.stream_id)
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert rows[(1, 0)] == "foo:1 stream 0" and rows[(1, side.stream_id)] == f"foo:1 stream {side.stream_id}"
    flows = [e for e in events if e.get("cat") == "ac2g"]
    starts = {e["id"] for e in flows if e["ph"] == "s"}
    ends = {e["id"] for e in flows if e["ph"] == "f"}
    for kernel in (mul, add):
        assert kernel["args"]["correlation"] in starts & ends


def test_a_cpu_profile_shows_launch_calls_but_no_device_work():
    """As CUDA's runtime calls do, foo's launch calls count as CPU activity; the kernels need
    ProfilerActivity.PrivateUse1."""
    x = torch.ones(8, device="foo")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x.nonzero()  # value-dependent: run synchronously
        x.exp()
        x.exp()  # queued
        torch.foo.synchronize()
    assert {"fooStreamRunSynchronous", "fooLaunchKernel"} <= {e.name for e in prof.events()}
    assert device_events(prof) == []


def test_record_function_and_schedule_work_as_on_cuda():
    x = torch.ones(8, device="foo")
    traced = []

    def on_trace_ready(p):
        traced.append(([e.name for e in device_events(p)], {a.key: a for a in p.key_averages()}))

    with profile(activities=DEVICE_ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=on_trace_ready) as prof:
        for step in range(5):
            with record_function(f"step {step}"):
                x.mul_(2)
            torch.foo.synchronize()
            prof.step()
    assert x.cpu().eq(32).all()
    assert len(traced) == 1
    kernels, by_name = traced[0]
    assert kernels.count("aten::mul_ kernel") == 2  # the two active steps only
    assert {"step 2", "step 3"} <= set(by_name) and not {"step 0", "step 1", "step 4"} & set(by_name)
    assert by_name["step 2"].device_time_total > 0


def test_compiled_kernels_are_on_the_timeline_under_their_names():
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.randn(64, device="foo")
    with inductor_config.patch(compile_threads=1):
        compiled = torch.compile(lambda a: torch.relu(a.sin() + 1))
        compiled(x)
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            compiled(x)
            torch.foo.synchronize()
    torch._dynamo.reset()
    assert any(e.name.startswith("cpp_fused") for e in device_events(prof))


def test_profile_memory_records_foo_allocations():
    """profile_memory=True: each operator's foo allocations, as the profiler shows CUDA's."""
    x = torch.randn(256, 256, device="foo")
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        y = x @ x
        del y
        torch.foo.synchronize()
    mm = averages(prof)["aten::mm"]
    assert mm.self_device_memory_usage == 256 * 256 * 4 and mm.cpu_memory_usage == 0
    header = prof.key_averages().table().splitlines()[1]
    assert "FOO Mem" in header and "Self FOO Mem" in header
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    assert {e.device_type() for e in events} == {DeviceType.PrivateUse1}
    assert sum(e.nbytes() for e in events) == 0  # the block was freed again


def test_profiling_stops_recording_device_work():
    x = torch.ones(8, device="foo")
    with profile(activities=DEVICE_ACTIVITIES):
        x.neg()
        torch.foo.synchronize()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        pass
    x.neg()
    torch.foo.synchronize()
    assert device_events(prof) == []


FRESH_SCRIPTS = {"quiet"}  # warnings are errors from before `import torch`: a fresh interpreter
SCRIPTS = {
    # Profiling foo prints nothing: no warning, no error from a profiler callback (stderr is checked).
    "quiet": ("""
        import warnings
        warnings.simplefilter("error")
        import torch
        from torch.profiler import ProfilerActivity, profile
        x = torch.randn(32, 32, device="foo")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            (x @ x).sum().item()
        prof.key_averages().table()
        with profile() as prof:
            (x @ x).sum().item()
        with torch.autograd.profiler.profile(use_device="foo") as legacy:
            (x @ x).sum().item()
        mm = {a.key: a for a in legacy.key_averages()}["aten::mm"]
        print("legacy_mm_device_time", mm.device_time_total > 0)
    """, {}),
}


# What Kineto itself logs in a torch built with CUDA (2.14.1's wheel) on a machine with no GPU: it starts CUPTI
# for any device activity and asks CUDA for its devices; a CPU-only profile in that torch, without foo, already
# prints the last line. Kineto's log lines read "LEVEL:date time pid:tid file:line] message".
KINETO_WITHOUT_A_GPU = {
    ("init.cpp", "function cbapi.getCuptiStatus() failed with error CUPTI_ERROR_UNKNOWN (999)"),
    ("init.cpp", "CUPTI initialization failed - CUDA profiler activities will be missing"),
    ("init.cpp", "If you see CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, refer to "
                 "https://developer.nvidia.com/nvidia-development-tools-solutions-err-nvgpuctrperm-cupti"),
    ("DeviceProperties.cpp", "gpuGetDeviceCount failed with code 35"),
}


def _kineto_line(line):
    match = re.fullmatch(r"[A-Z]+:\S+ \S+ \d+:\d+ (\S+):\d+\] (.*)", line)
    return match and (match[1], match[2])


def test_profiling_foo_prints_no_warnings_or_errors(subprocesses):
    result = subprocesses["quiet"]
    assert result.returncode == 0, result.stderr
    noise = [line for line in result.stderr.splitlines() if not line.startswith("USDT:")]  # Kineto's own log
    if torch.version.cuda is not None and not torch.cuda.is_available():
        noise = [line for line in noise if _kineto_line(line) not in KINETO_WITHOUT_A_GPU]
    assert noise == []
    # use_device="foo" times each operator with foo events on the stream (the stubs CUDA events serve).
    assert "legacy_mm_device_time True" in result.stdout
