"""Real client libraries on foo: transformers, accelerate and peft give CPU's results.

Tiny randomly initialised models (built from config objects, nothing downloaded) train for a few steps
on foo and on CPU from identical weights and must end with identical losses and parameters, bit for
bit; greedy generation must produce identical tokens. These are the checks that found foo's defects
with tied weights (Parameters replaced by Module.to), SiLU gradients (composite kernels) and dropout
(drawn from the CPU generator). Each test depends on as few of these properties as it can, so a failure
points at its cause:

  Module.to keeps Parameters            gpt2 training (tied), tied weights / optimizer made before the move,
                                        accelerate (optimizer made before prepare)
  SiLU gradients equal CPU's            llama training, peft LoRA, accelerate, Trainer (all Llama)
  dropout draws from foo's generator    dropout, gradient checkpointing (GPT-2 with untied embeddings and GELU)
  checkpoint replays foo's RNG state    gradient checkpointing (torch.utils.checkpoint saves and restores a
                                        device's generator only if its module has `_initialized`, as torch.cuda)
"""
import copy
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported: it reads the variable once

import pytest
import torch

transformers = pytest.importorskip("transformers")

STEPS = 4
VOCAB = 100
LLAMA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2, max_position_embeddings=32)  # hidden_act="silu", the default


def gpt2(dropout=0.0, tied=True):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                                     tie_word_embeddings=tied)
    return transformers.GPT2LMHeadModel(config)


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))


def batches(count=STEPS):
    data = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (2, 12), generator=data) for _ in range(count)]


def train(model, device, optimizer=None, seed=None):
    """`model` (on CPU) trained on `device` with AdamW, made after the move unless `optimizer` is given
    (made before the move, as accelerate's prepare() expects). `seed` seeds the run right before
    training: `torch.manual_seed` on CPU, `torch.foo.manual_seed` alone on foo (dropout must draw from
    foo's generator only)."""
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    model.to(device).train()
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-2)
    if seed is not None:
        (torch.foo.manual_seed if device == "foo" else torch.manual_seed)(seed)
    losses = []
    for ids in batches():
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    params = {name: p.detach().cpu() for name, p in model.named_parameters()}
    # Equal results prove nothing if neither run trained (an optimizer holding replaced Parameters).
    assert any(not torch.equal(params[name], p) for name, p in start.items()), f"the optimizer did not train on {device}"
    return losses, params


def assert_same_training(cpu, foo):
    (cpu_losses, cpu_params), (foo_losses, foo_params) = cpu, foo
    assert foo_losses == cpu_losses  # bit for bit
    assert cpu_params.keys() == foo_params.keys()
    for name in cpu_params:  # bit for bit, with a report of the mismatch
        torch.testing.assert_close(foo_params[name], cpu_params[name], rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")


def initial(make):
    torch.manual_seed(0)
    return make()


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2_tied_embeddings", "llama_silu"])
def test_training_equals_cpu(make):
    model = initial(make)
    assert_same_training(train(copy.deepcopy(model), "cpu"), train(model, "foo"))


def test_torchvision_resnet18_training_equals_cpu():
    """A torchvision ResNet-18 (random weights, batch norm in training mode) trained on foo gives CPU's losses,
    weights and running statistics, bit for bit. torchvision imports beside torch 2.14.1, not 2.13 (README:
    "Choosing a torch release")."""
    models = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    model = models.resnet18(num_classes=10)
    data = torch.Generator().manual_seed(1)
    steps = [(torch.randn(2, 3, 64, 64, generator=data), torch.randint(0, 10, (2,), generator=data))
             for _ in range(3)]

    def run(model, device):
        model.to(device).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        losses = []
        for images, labels in steps:
            loss = torch.nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, {name: t.detach().cpu() for name, t in model.state_dict().items()}

    assert_same_training(run(copy.deepcopy(model), "cpu"), run(model, "foo"))


def test_tied_weights_stay_tied_and_an_optimizer_made_before_the_move_trains():
    model = initial(gpt2)
    assert model.lm_head.weight is model.transformer.wte.weight
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # made on CPU, before the move
    cpu = train(copy.deepcopy(model), "cpu")
    foo = train(model, "foo", optimizer)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.device.type == "foo"
    assert all(p.device.type == "foo" for group in optimizer.param_groups for p in group["params"])
    assert_same_training(cpu, foo)


def test_dropout_draws_from_the_device_generator():
    model = initial(lambda: gpt2(dropout=0.1, tied=False))
    cpu = train(copy.deepcopy(model), "cpu", seed=7)
    other_seed = train(copy.deepcopy(model), "foo", seed=8)
    foo = train(model, "foo", seed=7)
    assert_same_training(cpu, foo)
    assert other_seed[0] != foo[0]  # dropout is active: another seed gives other losses


def test_gradient_checkpointing_replays_dropout_as_on_cpu():
    """Recomputing a checkpointed layer in the backward pass must redraw the forward's dropout masks, from
    foo's generator: the gradients are those of the masks the forward used, as on CPU."""
    model = initial(lambda: gpt2(dropout=0.1, tied=False))
    runs = {}
    for device, copy_ in (("cpu", copy.deepcopy(model)), ("foo", model)):
        copy_.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(use_reentrant=False))
        runs[device] = train(copy_, device, seed=7)
    assert_same_training(runs["cpu"], runs["foo"])


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_greedy_generation_equals_cpu(make):
    model = initial(make).eval()
    prompt = batches(1)[0]
    expected = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    actual = model.to("foo").generate(prompt.to("foo"), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert actual.device.type == "foo"
    assert actual.shape == (2, 12 + 8)
    assert torch.equal(actual.cpu(), expected)


def test_static_cache_generation_compiled_with_reduce_overhead_equals_eager_cpu():
    """transformers' documented fast decoding: a static KV cache, each decoding step compiled with
    mode="reduce-overhead" (its CompileConfig's default), replayed as a foo graph."""
    model = initial(llama).eval()
    prompt = batches(1)[0]
    static = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, cache_implementation="static")
    expected = model.generate(prompt, **static)
    compile_config = transformers.CompileConfig()
    assert compile_config.mode == "reduce-overhead"
    compile_config._compile_all_devices = True  # transformers compiles by itself only on the devices it lists
    model.to("foo")
    torch._dynamo.reset()
    try:
        for _ in range(2):  # the second generation replays the graphs the first recorded
            actual = model.generate(prompt.to("foo"), compile_config=compile_config, **static)
            assert torch.equal(actual.cpu(), expected)
        from torch._inductor import cudagraph_trees

        assert len(list(cudagraph_trees.get_container(0).tree_manager.get_roots())) > 0
    finally:
        torch._dynamo.reset()


def test_peft_lora_training_equals_cpu():
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(initial(llama), config)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    cpu, foo = train(copy.deepcopy(model), "cpu"), train(model, "foo")
    assert_same_training(cpu, foo)
    assert any(not torch.equal(foo[1][n], p) for n, p in before.items())  # the adapters trained


ACCELERATE = f"""
    import copy, json, torch, foo_backend, transformers
    from accelerate import Accelerator
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{LLAMA!r}))
    reference = copy.deepcopy(model)
    data = torch.Generator().manual_seed(1)
    loader = torch.utils.data.DataLoader(torch.randint(0, 100, (8, 12), generator=data), batch_size=2)

    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # before the move, as accelerate's examples do
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    devices, same_losses = set(), []
    for ids in loader:
        devices.add(str(ids.device))
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad(); accelerator.backward(loss); optimizer.step()
        ref_ids = ids.cpu()
        ref_loss = reference(input_ids=ref_ids, labels=ref_ids).loss
        ref_optimizer.zero_grad(); ref_loss.backward(); ref_optimizer.step()
        same_losses.append(loss.item() == ref_loss.item())
    print(json.dumps(dict(
        accelerator=str(accelerator.device), batches=sorted(devices),
        params=sorted({{str(p.device) for p in model.parameters()}}), same_losses=same_losses,
        same_params=all(torch.equal(p.cpu(), r) for p, r in zip(model.parameters(), reference.parameters())))))
"""


TRAINER = f"""
    import json, os, torch, foo_backend, transformers
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{LLAMA!r}))
    data = torch.Generator().manual_seed(1)
    dataset = [dict(input_ids=ids, labels=ids) for ids in torch.randint(0, 100, (8, 12), generator=data)]
    args = transformers.TrainingArguments(output_dir="trainer.out", max_steps=3, per_device_train_batch_size=2,
                                          learning_rate=1e-2, logging_steps=1, save_strategy="no", report_to=[],
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    path = os.path.abspath(args.device.type + ".pt")
    torch.save({{n: p.detach().cpu() for n, p in model.named_parameters()}}, path)
    print(json.dumps(dict(
        path=path, device=str(args.device), params=sorted({{str(p.device) for p in model.parameters()}}),
        losses=[log["loss"] for log in trainer.state.log_history if "loss" in log])))
"""


# Fresh interpreters (tests/support/subprocesses.py): accelerate's state is a process-wide singleton.
SCRIPTS = {
    # On foo under the sanitizer (torch.foo.sanitizer), which must stay silent on these correct programs.
    "accelerate": (ACCELERATE, {"ACCELERATE_TORCH_DEVICE": "foo", "FOO_SANITIZER": "1"}),
    "trainer_cpu": (TRAINER, {"ACCELERATE_TORCH_DEVICE": None}),  # unset: silently the CPU
    "trainer_foo": (TRAINER, {"ACCELERATE_TORCH_DEVICE": "foo", "FOO_SANITIZER": "1"}),
}


def last_json(subprocesses, name):
    """The JSON that script `name` printed last."""
    return json.loads(subprocesses.check(name).strip().splitlines()[-1])


def test_accelerate_prepares_on_foo_when_told_to(subprocesses):
    pytest.importorskip("accelerate")
    result = last_json(subprocesses, "accelerate")
    assert result == dict(accelerator="foo", batches=["foo:0"], params=["foo:0"], same_losses=[True] * 4,
                          same_params=True)


def test_trainer_trains_on_foo_when_told_to_and_equals_cpu(subprocesses):
    pytest.importorskip("accelerate")
    cpu, foo = last_json(subprocesses, "trainer_cpu"), last_json(subprocesses, "trainer_foo")
    assert (cpu["device"], cpu["params"]) == ("cpu", ["cpu"])
    assert (foo["device"], foo["params"]) == ("foo", ["foo:0"])
    assert len(foo["losses"]) == 3
    assert foo["losses"] == cpu["losses"]
    assert_same_training(([], torch.load(cpu["path"])), ([], torch.load(foo["path"])))
