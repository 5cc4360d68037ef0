"""Finding a stream race with torch.foo.sanitizer.

A data pipeline copies each batch to the device on a side stream, so that the copy overlaps the compute of
the step before. The copy's stream and the compute's must be ordered: the compute waits for the copy
(``wait_stream``), and the batch, allocated on the side stream but used on the compute stream, is recorded on
it (``record_stream``) so that its memory is not reused while the compute may still read it. Forgetting
either is a bug that a GPU shows only when timing happens to expose it; under the sanitizer foo reports it
at the call that causes it, with both stacks.

    python examples/find_race.py
"""
import torch

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)


def run(batches, weight, copy_stream, wait=True, record=True):
    """The pipeline: each batch copied on `copy_stream`, multiplied on the current stream."""
    compute = torch.foo.current_stream()
    outputs = []
    for batch in batches:
        with torch.foo.stream(copy_stream):
            on_device = batch.to("foo", non_blocking=True)
        if wait:
            compute.wait_stream(copy_stream)
        if record:
            on_device.record_stream(compute)
        outputs.append((on_device @ weight).relu().sum(dim=1))
    return torch.stack(outputs)


def main():
    torch.manual_seed(0)
    batches = [torch.randn(64, 32).pin_memory() for _ in range(4)]
    weight_cpu = torch.randn(32, 16)
    weight = weight_cpu.to("foo")
    copy_stream = torch.foo.Stream()
    torch.foo.sanitizer.enable()

    for bug in ("wait", "record"):
        torch.foo.synchronize()
        try:
            run(batches, weight, copy_stream, wait=bug != "wait", record=bug != "record")
            raise SystemExit(f"the sanitizer missed the forgotten {bug}_stream")
        except RuntimeError as error:
            print(f"---- without {bug}_stream: ----")
            print(error)
            print()

    torch.foo.synchronize()
    result = run(batches, weight, copy_stream).cpu()
    expected = torch.stack([(batch @ weight_cpu).relu().sum(dim=1) for batch in batches])
    torch.testing.assert_close(result, expected)
    print("OK: with wait_stream and record_stream the sanitizer is silent and foo's results equal CPU's")


if __name__ == "__main__":
    main()
