"""The rank code of tests/test_distributed_training.py: what users run on top of torch.distributed (DDP,
FSDP2, DeviceMesh, DTensor and tensor parallelism, functional collectives, distributed checkpoints) on
foo tensors through foo's c10d backend "fccl", each checked against the same training in one process.

Launched by torchrun, one process per rank:

    torchrun --standalone --nproc-per-node 2 tests/support/distributed_training_ranks.py GROUP...

Each GROUP names a list of checks (CHECKS below); one world runs several groups, one after the other, in
one process group (starting a world costs a process per rank). Every rank runs the checks in order; after
each one the ranks exchange their outcomes over a separate gloo group (so a broken fccl group cannot hide a
result) and rank 0 prints one line per check: "<check> ok", or "<check> FAIL rank <r>: <error> (at line
<n>) | rank ...", the failing rank also printing the whole traceback on stderr.

Models are made on CPU from a fixed seed, then moved; data comes from seeded CPU generators, so every
rank and every reference sees the same numbers.
"""
import contextlib
import copy
import ctypes
import datetime
import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from foo_backend import _patches

# A rank that hangs dumps its stacks and exits; torchrun then stops the others.
RANK_TIMEOUT_S = 240
# Collectives give up after this (a rank that died, or ranks that disagree about the next collective).
GROUP_TIMEOUT = datetime.timedelta(seconds=20)
# What get_backend() names the groups of init_process_group() without a backend (main below): on 2.13 foo names
# fccl for it (foo_backend._patches, "unnamed_process_group_backend"); 2.14 says "undefined", as for CUDA's.
UNNAMED_BACKEND = "fccl" if _patches.torch_release() == "2.13" else "undefined"

STEPS = 3
BATCH = 8
IN, HIDDEN, OUT = 16, 64, 4

CHECKS = {}


def check(*worlds):
    """Registers a check for the given worlds; a check raises (an AssertionError or any error) to fail."""
    def register(fn):
        for world in worlds:
            CHECKS.setdefault(world, []).append(fn)
        return fn
    return register


class Context:
    def __init__(self):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.device = torch.device("foo", self.local_rank)
        self.control = dist.new_group(backend="gloo")  # outcomes and small host-side agreements
        self.tmpdir = None

    def shared_tmpdir(self):
        """A directory every rank uses (one machine); rank 0 removes it at the end."""
        if self.tmpdir is None:
            path = [tempfile.mkdtemp(prefix="foo_dist_training_") if self.rank == 0 else None]
            dist.broadcast_object_list(path, src=0, group=self.control)
            self.tmpdir = path[0]
        return self.tmpdir

    def gather(self, obj):
        objs = [None] * self.world_size
        dist.all_gather_object(objs, obj, group=self.control)
        return objs


# ---- helpers ----------------------------------------------------------------------------------------------

def close(actual, expected, what, rtol=1.3e-6, atol=1e-5):
    """Asserts that two tensors (DTensors compared as full tensors, on any device) are close; rtol=atol=0
    means bitwise equal."""
    actual = full(actual).detach().cpu()
    expected = full(expected).detach().cpu()
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError as e:
        raise AssertionError(f"{what}: {' '.join(str(e).split())}") from None


def bitwise(actual, expected, what):
    close(actual, expected, what, rtol=0, atol=0)


def full(t):
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def mlp(seed, sizes=(IN, HIDDEN, HIDDEN, OUT)):
    """An MLP made on CPU from a fixed seed (then moved by the caller)."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)  # CPU only: no random numbers are drawn on foo here
        layers = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)


def batches(seed=1, steps=STEPS, batch=BATCH, in_features=IN, out_features=OUT):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, in_features, generator=g), torch.randn(batch, out_features, generator=g))
            for _ in range(steps)]


def share(t, ctx):
    """This rank's contiguous share of a batch."""
    n = t.shape[0] // ctx.world_size
    return t[ctx.rank * n:(ctx.rank + 1) * n]


def train(model, optimizer, data, device, part=lambda t: t, micro_batches=1, sync=None):
    """Trains `model` on `data`, each batch cut by `part` (this rank's share, or the whole) and split into
    `micro_batches` accumulated before each step (`sync(i)` is the context of micro-batch i: DDP's no_sync)."""
    for x, y in data:
        x, y = part(x).to(device), part(y).to(device)
        optimizer.zero_grad()
        for i, (xm, ym) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
            with (sync(i) if sync else contextlib.nullcontext()):
                (F.mse_loss(model(xm).float(), ym) / micro_batches).backward()
        optimizer.step()


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def adam(params, lr=1e-2):
    return torch.optim.Adam(params, lr=lr)


def reference(ctx, **train_kwargs):
    """The single-process run: the same model trained with SGD on every whole batch, on this rank's device."""
    model = mlp(0).to(ctx.device)
    train(model, sgd(model.parameters()), batches(), ctx.device, **train_kwargs)
    return model


def same_on_every_rank(ctx, tensors, what):
    """The tensors are bitwise equal on every rank (replicas DDP keeps identical)."""
    mine = [full(t).detach().cpu() for t in tensors]
    for r, theirs in enumerate(ctx.gather(mine)):
        for i, (a, b) in enumerate(zip(mine, theirs)):
            bitwise(a, b, f"{what} {i} of rank {ctx.rank} against rank {r}")


# ---- DDP --------------------------------------------------------------------------------------------------

def ddp(ctx, model, **kwargs):
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(model.to(ctx.device), device_ids=[ctx.local_rank], **kwargs)


def assert_fccl(group):
    """The group runs foo tensors through fccl."""
    assert dist.get_backend(group) == UNNAMED_BACKEND, dist.get_backend(group)
    assert type(group._get_backend(torch.device("foo"))).__name__ == "ProcessGroupFoo"


@check("ddp")
def ddp_matches_reference(ctx):
    """Each rank trains on its half of every batch; DDP averages the gradients: one process on the whole
    batch (the mean of two half-batch means is the whole mean up to rounding)."""
    model = ddp(ctx, mlp(0))
    train(model, sgd(model.parameters()), batches(), ctx.device, part=lambda t: share(t, ctx))
    for p, q in zip(model.module.parameters(), reference(ctx).parameters()):
        assert p.device == ctx.device, p.device
        close(p, q, "parameter")
    same_on_every_rank(ctx, list(model.module.parameters()), "parameter")


@check("ddp")
def ddp_same_batch_is_bitwise(ctx):
    """Every rank on the whole batch: DDP's average of equal gradients, (g/2 + g/2), is g exactly, so the
    training is bitwise the single-process one."""
    model = ddp(ctx, mlp(0))
    train(model, sgd(model.parameters()), batches(), ctx.device)
    for p, q in zip(model.module.parameters(), reference(ctx).parameters()):
        bitwise(p, q, "parameter")


@check("ddp")
def ddp_several_buckets_match_reference(ctx):
    """Gradient buckets of 1 kB: after the first iteration the reducer rebuilds them, in the order the
    gradients became ready, as the last layer with the middle bias, the middle weight (16 kB, alone),
    and the first layer; each bucket is all-reduced on its own."""
    model = ddp(ctx, mlp(0), bucket_cap_mb=0.001)
    train(model, sgd(model.parameters()), batches(), ctx.device, part=lambda t: share(t, ctx))
    buckets = model.reducer._get_zeros_like_grad_buckets()
    sizes = model._get_ddp_logging_data().get("rebuilt_bucket_sizes")
    assert len(buckets) >= 3, f"{len(buckets)} bucket(s) (rebuilt sizes in bytes: {sizes})"
    assert all(b.buffer().device == ctx.device for b in buckets), [b.buffer().device for b in buckets]
    for p, q in zip(model.module.parameters(), reference(ctx).parameters()):
        close(p, q, "parameter")


@check("ddp")
def ddp_no_sync_accumulation_matches_reference(ctx):
    """Two micro-batches per step, the first under no_sync(): the gradients accumulate locally and are
    averaged with the second backward."""
    model = ddp(ctx, mlp(0))
    local_grads = []

    def sync(i):
        if i == 0:
            return model.no_sync()
        # Before the synchronised backward: the gradients are this rank's own (they differ between ranks).
        local_grads.append(model.module[0].weight.grad.detach().cpu().clone())
        return contextlib.nullcontext()

    train(model, sgd(model.parameters()), batches(), ctx.device, part=lambda t: share(t, ctx), micro_batches=2,
          sync=sync)
    ref = reference(ctx, micro_batches=2)
    for p, q in zip(model.module.parameters(), ref.parameters()):
        close(p, q, "parameter")
    theirs = ctx.gather(local_grads[0])
    assert not torch.equal(theirs[0], theirs[1]), "gradients under no_sync() were synchronised"
    same_on_every_rank(ctx, list(model.module.parameters()), "parameter")


@check("ddp")
def ddp_fp16_compress_hook_close_to_reference(ctx):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    model = ddp(ctx, mlp(0))
    model.register_comm_hook(None, fp16_compress_hook)
    train(model, sgd(model.parameters()), batches(), ctx.device, part=lambda t: share(t, ctx))
    # Gradients travel as float16 (about 3 decimal digits): close to the reference, not equal.
    for p, q in zip(model.module.parameters(), reference(ctx).parameters()):
        close(p, q, "parameter", rtol=1e-2, atol=1e-3)
    same_on_every_rank(ctx, list(model.module.parameters()), "parameter")


@check("ddp")
def ddp_runtime_stats(ctx):
    """DDP's runtime statistics are measured on foo (foo registers a c10d Timer for its device type)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ddp(ctx, mlp(0))
        model._set_ddp_runtime_logging_sample_rate(1)
        train(model, sgd(model.parameters()), batches(steps=4), ctx.device, part=lambda t: share(t, ctx))
        stats = model._get_ddp_logging_data()
    timer_warnings = [str(w.message) for w in caught if "Time stats" in str(w.message)]
    assert not timer_warnings, timer_warnings
    times = {k: stats.get(k) for k in ("avg_forward_compute_time", "avg_backward_compute_time",
                                        "avg_backward_comm_time")}
    assert all(isinstance(v, int) and v > 0 for v in times.values()), {**times, "all stats": stats}
    # (stats["backend_name"] is "custom": c10d names every third-party backend so.)
    assert_fccl(model.process_group)


@check("ddp")
def ddp_metrics_gathered_as_objects(ctx):
    """A usual logging step after each training step: the loss averaged over the ranks on the device
    (dist.all_reduce of a foo tensor, not waited for by the host), then host-side metrics gathered with
    dist.all_gather_object on the same default group (which sends CPU tensors)."""
    model = ddp(ctx, mlp(0))
    optimizer = sgd(model.parameters())
    for step, (x, y) in enumerate(batches(steps=10)):
        loss = F.mse_loss(model(share(x, ctx).to(ctx.device)), share(y, ctx).to(ctx.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
        metrics = [None] * ctx.world_size
        dist.all_gather_object(metrics, {"rank": ctx.rank, "step": step})
        assert metrics == [{"rank": r, "step": step} for r in range(ctx.world_size)], (step, metrics)
        losses = ctx.gather(loss.item())
        close(mean_loss, torch.tensor(sum(losses) / ctx.world_size), f"averaged loss at step {step}")


# ---- FSDP2 ------------------------------------------------------------------------------------------------

def fsdp_model(ctx, mesh, seed=0, mp_policy=None):
    """The MLP (its last layer's 7 rows shard unevenly: 4 + 3), each Linear sharded, then the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model = mlp(seed, sizes=(IN, HIDDEN, HIDDEN, 7)).to(ctx.device)
    kwargs = {"mesh": mesh, "mp_policy": mp_policy or MixedPrecisionPolicy()}
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def fsdp_batches(steps=STEPS):
    return batches(steps=steps, out_features=7)


def fsdp_reference(ctx, seed=0, steps=STEPS, **train_kwargs):
    model = mlp(seed, sizes=(IN, HIDDEN, HIDDEN, 7)).to(ctx.device)
    train(model, adam(model.parameters()), fsdp_batches(steps), ctx.device, **train_kwargs)
    return model


def mesh_1d():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("foo", (dist.get_world_size(),))


@check("fsdp")
def fsdp_parameters_are_sharded_dtensors_on_foo(ctx):
    from torch.distributed.tensor import DTensor, Shard
    model = fsdp_model(ctx, mesh_1d())
    for (name, p), q in zip(model.named_parameters(), mlp(0, sizes=(IN, HIDDEN, HIDDEN, 7)).parameters()):
        assert isinstance(p, DTensor), (name, type(p))
        assert p.placements == (Shard(0),), (name, p.placements)
        local = p.to_local()
        assert local.device == ctx.device and p.device == ctx.device, (name, local.device, p.device)
        rows = -(-q.shape[0] // ctx.world_size)  # torch.chunk's shares
        bitwise(local, q[ctx.rank * rows:(ctx.rank + 1) * rows], f"{name}'s shard")
        full_tensor = p.full_tensor()
        assert full_tensor.device == ctx.device, full_tensor.device
        bitwise(full_tensor, q, f"{name}'s full_tensor()")


@check("fsdp")
def fsdp_matches_reference(ctx):
    model = fsdp_model(ctx, mesh_1d())
    train(model, adam(model.parameters()), fsdp_batches(), ctx.device, part=lambda t: share(t, ctx))
    for (name, p), q in zip(model.named_parameters(), fsdp_reference(ctx).parameters()):
        assert p.to_local().device == ctx.device, (name, p.to_local().device)
        close(p, q, name)


@check("fsdp")
def fsdp_same_batch_is_bitwise(ctx):
    """Every rank on the whole batch: the averaged gradient is each rank's exactly, and Adam's elementwise
    update of a shard is that of the same rows of the whole parameter."""
    model = fsdp_model(ctx, mesh_1d())
    train(model, adam(model.parameters()), fsdp_batches(), ctx.device)
    for (name, p), q in zip(model.named_parameters(), fsdp_reference(ctx).parameters()):
        bitwise(p, q, name)


@check("fsdp")
def fsdp_bf16_mixed_precision_matches_emulation(ctx):
    """MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32), each rank on its half batch.

    The reference is one process doing the same arithmetic, not the float32 training with a loose
    tolerance: bfloat16 keeps 8 bits, so after a few Adam steps the two trainings differ by more than any
    tolerance that would still catch a wrong reduction (say, a gradient summed instead of averaged, or
    reduced in bfloat16). The emulation casts the float32 parameters to bfloat16 (FSDP2's all-gather of
    bfloat16 copies of the shards), runs the forward and backward of each half batch in bfloat16 (FSDP2
    casts the root's inputs), casts the gradients to float32 and averages them (FSDP2's float32
    reduce-scatter with AVG: (a + b) / 2 equals a / 2 + b / 2 exactly), and steps Adam on the float32
    parameters. The math is the same, so the result must be bitwise equal; a loose comparison with the
    float32 reference is added as a sanity check of the emulation itself.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = fsdp_model(ctx, mesh_1d(), mp_policy=policy)
    train(model, adam(model.parameters()), fsdp_batches(), ctx.device, part=lambda t: share(t, ctx))

    master = mlp(0, sizes=(IN, HIDDEN, HIDDEN, 7)).to(ctx.device)
    optimizer = adam(master.parameters())
    for x, y in fsdp_batches():
        grads = []
        for r in range(ctx.world_size):
            low = copy.deepcopy(master).to(torch.bfloat16)
            n = x.shape[0] // ctx.world_size
            xr, yr = x[r * n:(r + 1) * n].to(ctx.device), y[r * n:(r + 1) * n].to(ctx.device)
            F.mse_loss(low(xr.to(torch.bfloat16)).float(), yr).backward()
            grads.append([p.grad.float() for p in low.parameters()])
        optimizer.zero_grad()
        for p, *gs in zip(master.parameters(), *grads):
            p.grad = sum(gs) / ctx.world_size
        optimizer.step()

    fp32 = fsdp_reference(ctx)
    for (name, p), q, q32 in zip(model.named_parameters(), master.parameters(), fp32.parameters()):
        assert p.dtype == torch.float32 and p.to_local().device == ctx.device, (name, p.dtype, p.to_local().device)
        close(p, q32, f"{name} against float32 training (sanity)", rtol=0, atol=0.05)
        bitwise(p, q, f"{name} against the bfloat16 emulation")


@check("checkpoint")
def dcp_save_load_resumes_fsdp_training(ctx):
    """Training that saves a checkpoint after every step (dcp.save of the FSDP2 model's and its Adam's
    state dicts, from get_state_dict); the last one, dcp.load-ed and set_state_dict-ed into a fresh FSDP2
    model (other initial weights, other learning rate, no optimizer state), brings everything back, and
    both continue identically."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    mesh = mesh_1d()
    data = fsdp_batches(steps=6)
    part = lambda t: share(t, ctx)  # noqa: E731

    model = fsdp_model(ctx, mesh, seed=0)
    optimizer = adam(model.parameters())
    for step in range(4):
        train(model, optimizer, data[step:step + 1], ctx.device, part=part)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        path = os.path.join(ctx.shared_tmpdir(), f"step{step}")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)

    fresh = fsdp_model(ctx, mesh, seed=1)
    fresh_optimizer = adam(fresh.parameters(), lr=1e-3)
    fresh_model_sd, fresh_optim_sd = get_state_dict(fresh, fresh_optimizer)
    state = {"model": fresh_model_sd, "optim": fresh_optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    assert set(model.state_dict()) == set(fresh.state_dict())
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        assert q.to_local().device == ctx.device, (name, q.to_local().device)
        bitwise(q.to_local(), p.to_local(), f"loaded {name}")
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"], fresh_optimizer.param_groups[0]
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        saved, loaded = optimizer.state[p], fresh_optimizer.state[q]
        assert set(saved) == set(loaded) == {"step", "exp_avg", "exp_avg_sq"}, (name, set(saved), set(loaded))
        for key in saved:
            a, b = saved[key], loaded[key]
            a, b = (a.to_local() if hasattr(a, "to_local") else a), (b.to_local() if hasattr(b, "to_local") else b)
            bitwise(b, a, f"loaded optimizer state {name}.{key}")

    train(model, optimizer, data[4:], ctx.device, part=part)
    train(fresh, fresh_optimizer, data[4:], ctx.device, part=part)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        bitwise(q, p, f"{name} after resuming")


# ---- DeviceMesh, DTensor, tensor parallelism, functional collectives ---------------------------------------------

@check("fsdp")
def device_mesh_1d(ctx):
    mesh = mesh_1d()
    assert mesh.device_type == "foo", mesh.device_type
    assert mesh.mesh.tolist() == list(range(ctx.world_size)), mesh.mesh
    assert mesh.get_local_rank() == ctx.rank
    group = mesh.get_group()
    assert_fccl(group)
    t = torch.full((3,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t, group=group)
    bitwise(t, torch.full((3,), float(sum(range(1, ctx.world_size + 1)))), "all_reduce on the mesh's group")


@check("fsdp")
def dtensor_distribute_redistribute_ops(ctx):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = mesh_1d()
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(8, 6, generator=g), torch.randn(6, 5, generator=g)

    da = distribute_tensor(a.to(ctx.device), mesh, [Shard(0)])
    local = da.to_local()
    assert local.device == ctx.device and local.shape == (4, 6), (local.device, local.shape)
    bitwise(da.to_local(), a[4 * ctx.rank:4 * (ctx.rank + 1)], "Shard(0)'s local tensor")
    bitwise(da.full_tensor(), a, "full_tensor() of Shard(0)")
    replicated = da.redistribute(mesh, [Replicate()])
    assert replicated.placements == (Replicate(),)
    bitwise(replicated.to_local(), a, "Shard(0) -> Replicate's local tensor")
    resharded = replicated.redistribute(mesh, [Shard(0)])
    bitwise(resharded.to_local(), da.to_local(), "Replicate -> Shard(0)'s local tensor")
    columns = da.redistribute(mesh, [Shard(1)]).to_local()
    bitwise(columns, a[:, 3 * ctx.rank:3 * (ctx.rank + 1)], "Shard(0) -> Shard(1)'s local tensor")

    db = distribute_tensor(b.to(ctx.device), mesh, [Replicate()])
    product = da @ db  # Shard(0) @ Replicate: a row-sharded product, no communication
    assert product.placements == (Shard(0),), product.placements
    close(product, a @ b, "Shard(0) @ Replicate")
    partial = (distribute_tensor(a.to(ctx.device), mesh, [Shard(1)])
               @ distribute_tensor(b.to(ctx.device), mesh, [Shard(0)]))
    close(partial, a @ b, "Shard(1) @ Shard(0) (a partial sum)")
    close(da.sum(), a.sum(), "sum of Shard(0)")
    close(da.sum(dim=1), a.sum(dim=1), "sum(dim=1) of Shard(0)")
    bitwise((da * 2 + 1).full_tensor(), a * 2 + 1, "elementwise ops on Shard(0)")


@check("fsdp")
def tensor_parallel_mlp_matches_module(ctx):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = mesh_1d()
    sizes = (IN, HIDDEN, IN)
    model = parallelize_module(mlp(0, sizes).to(ctx.device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    ref = mlp(0, sizes).to(ctx.device)
    assert model[0].weight.to_local().shape == (HIDDEN // ctx.world_size, IN), model[0].weight.to_local().shape
    assert model[2].weight.to_local().shape == (IN, HIDDEN // ctx.world_size), model[2].weight.to_local().shape
    optimizer, ref_optimizer = sgd(model.parameters()), sgd(ref.parameters())
    for step, (x, _) in enumerate(batches(in_features=IN)):
        x = x.to(ctx.device)
        out, ref_out = model(x), ref(x)
        assert not hasattr(out, "placements") and out.device == ctx.device, (type(out), out.device)
        close(out, ref_out, f"forward {step}")
        optimizer.zero_grad()
        ref_optimizer.zero_grad()
        out.square().sum().backward()
        ref_out.square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.grad, q.grad, f"gradient of {name} at step {step}")
        optimizer.step()
        ref_optimizer.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p, q, name)


@check("fsdp")
def functional_collectives(ctx):
    import torch.distributed._functional_collectives as funcol
    mesh = mesh_1d()
    ws, r = ctx.world_size, ctx.rank
    t = torch.arange(4 * ws, dtype=torch.float32, device=ctx.device) + 100 * r
    everyone = [torch.arange(4 * ws, dtype=torch.float32) + 100 * i for i in range(ws)]

    for group in (mesh, dist.group.WORLD, list(range(ws))):
        reduced = funcol.all_reduce(t, "sum", group)
        assert isinstance(reduced, funcol.AsyncCollectiveTensor), type(reduced)
        assert reduced.device == ctx.device, reduced.device
        waited = funcol.wait_tensor(reduced)
        assert waited.device == ctx.device, waited.device
        bitwise(waited, sum(everyone), f"all_reduce over {type(group).__name__}")

    gathered = funcol.all_gather_single(t, 0, mesh)
    assert isinstance(gathered, funcol.AsyncCollectiveTensor), type(gathered)
    assert gathered.device == ctx.device, gathered.device
    bitwise(funcol.wait_tensor(gathered), torch.cat(everyone), "all_gather_single")

    scattered = funcol.reduce_scatter_single(t, "sum", 0, mesh)
    assert isinstance(scattered, funcol.AsyncCollectiveTensor), type(scattered)
    assert scattered.device == ctx.device, scattered.device
    bitwise(funcol.wait_tensor(scattered), sum(everyone)[4 * r:4 * (r + 1)], "reduce_scatter_single")

    # The names PyTorch 2.13 deprecates in favour of the two above, still widely used.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        gathered = funcol.all_gather_tensor(t, 0, mesh)
        scattered = funcol.reduce_scatter_tensor(t, "sum", 0, mesh)
    assert isinstance(gathered, funcol.AsyncCollectiveTensor) and isinstance(scattered, funcol.AsyncCollectiveTensor)
    bitwise(funcol.wait_tensor(gathered), torch.cat(everyone), "all_gather_tensor")
    bitwise(funcol.wait_tensor(scattered), sum(everyone)[4 * r:4 * (r + 1)], "reduce_scatter_tensor")

    # Used as a tensor (no explicit wait): the first use waits.
    bitwise(funcol.all_reduce(t, "max", mesh) * 1, everyone[-1], "all_reduce max, used directly")
    bitwise(funcol.all_reduce(t, "avg", mesh) + 0, sum(everyone) / ws, "all_reduce avg, used directly")


# ---- a 2-D mesh (4 ranks) -----------------------------------------------------------------------------------

def mesh_2d():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("foo", (2, 2), mesh_dim_names=("dp", "tp"))


@check("mesh_2d")
def device_mesh_2d_submeshes(ctx):
    mesh = mesh_2d()
    r = ctx.rank
    assert ctx.device.index == r and torch.foo.device_count() >= 4, (ctx.device, torch.foo.device_count())
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]], mesh.mesh
    dp, tp = mesh["dp"], mesh["tp"]
    assert dp.device_type == tp.device_type == "foo"
    assert dp.mesh.tolist() == [r % 2, r % 2 + 2], dp.mesh
    assert tp.mesh.tolist() == [r // 2 * 2, r // 2 * 2 + 1], tp.mesh
    assert (mesh.get_local_rank("dp"), mesh.get_local_rank("tp")) == (r // 2, r % 2)
    assert dp.get_local_rank() == r // 2 and tp.get_local_rank() == r % 2
    for name in ("dp", "tp"):
        assert_fccl(mesh.get_group(name))
    flat = mesh["dp", "tp"]
    assert flat.mesh.tolist() == [[0, 1], [2, 3]], flat.mesh


@check("mesh_2d")
def device_mesh_2d_collective_on_each_dim(ctx):
    import torch.distributed._functional_collectives as funcol
    mesh = mesh_2d()
    r = ctx.rank
    t = torch.full((2,), float(10 ** r), device=ctx.device)  # 1, 10, 100, 1000: a sum shows who took part
    on_dp = t.clone()
    dist.all_reduce(on_dp, group=mesh.get_group("dp"))
    bitwise(on_dp, torch.full((2,), float(10 ** (r % 2) + 10 ** (r % 2 + 2))), "all_reduce over dp")
    on_tp = t.clone()
    dist.all_reduce(on_tp, group=mesh["tp"].get_group())
    bitwise(on_tp, torch.full((2,), float(10 ** (r // 2 * 2) + 10 ** (r // 2 * 2 + 1))), "all_reduce over tp")
    gathered = funcol.all_gather_single(t, 0, (mesh, 1))  # the tp dimension, given by index
    row = [10.0 ** (r // 2 * 2)] * 2 + [10.0 ** (r // 2 * 2 + 1)] * 2
    bitwise(gathered, torch.tensor(row), "all_gather_single over tp")
    everything = t.clone()
    dist.all_reduce(everything)
    bitwise(everything, torch.full((2,), 1111.0), "all_reduce over the world")


@check("mesh_2d")
def dtensor_2d(ctx):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = mesh_2d()
    r = ctx.rank
    a = torch.randn(8, 6, generator=torch.Generator().manual_seed(3))
    d = distribute_tensor(a.to(ctx.device), mesh, [Shard(0), Shard(1)])
    bitwise(d.to_local(), a[4 * (r // 2):4 * (r // 2 + 1), 3 * (r % 2):3 * (r % 2 + 1)], "[Shard(0), Shard(1)] local")
    bitwise(d.full_tensor(), a, "full_tensor() of [Shard(0), Shard(1)]")
    mixed = d.redistribute(mesh, [Replicate(), Shard(0)])
    bitwise(mixed.to_local(), a[4 * (r % 2):4 * (r % 2 + 1)], "[Replicate(), Shard(0)] local")
    close(d.sum(), a.sum(), "sum of [Shard(0), Shard(1)]")


@check("mesh_2d")
def fsdp_with_tensor_parallel_2d_matches_reference(ctx):
    """FSDP2 over dp, tensor parallelism over tp (the usual 2-D training): one process on whole batches."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = mesh_2d()
    sizes = (IN, HIDDEN, OUT)
    model = parallelize_module(mlp(0, sizes).to(ctx.device), mesh["tp"],
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    dp_rank, dp_size = mesh.get_local_rank("dp"), mesh["dp"].size()

    def part(t):
        n = t.shape[0] // dp_size
        return t[dp_rank * n:(dp_rank + 1) * n]

    train(model, adam(model.parameters()), batches(), ctx.device, part=part)
    ref = mlp(0, sizes).to(ctx.device)
    train(ref, adam(ref.parameters()), batches(), ctx.device)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.to_local().device == ctx.device, (name, p.to_local().device)
        close(p, q, name)


# ---- driver -----------------------------------------------------------------------------------------------------

def _die_with_launcher():
    """A rank whose torchrun agent is killed dies too (torchrun starts ranks in their own sessions)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _summary(e):
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
    where = f" (at line {frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {' '.join(str(e).split())}{where}"


def main(groups):
    _die_with_launcher()
    faulthandler.dump_traceback_later(RANK_TIMEOUT_S, exit=True)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.foo.set_device(local_rank)
    dist.init_process_group(timeout=GROUP_TIMEOUT)
    ctx = Context()
    for fn in [fn for group in groups for fn in CHECKS[group]]:
        try:
            fn(ctx)
            outcome = None
        except Exception as e:  # noqa: BLE001  (reported, and the next check runs)
            traceback.print_exc()
            outcome = _summary(e)
        outcomes = ctx.gather(outcome)
        failures = [f"rank {r}: {o}" for r, o in enumerate(outcomes) if o is not None]
        if ctx.rank == 0:
            print(fn.__name__, "FAIL " + " | ".join(failures) if failures else "ok", flush=True)
    dist.barrier(group=ctx.control)
    if ctx.rank == 0 and ctx.tmpdir:
        shutil.rmtree(ctx.tmpdir, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
