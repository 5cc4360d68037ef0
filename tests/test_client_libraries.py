"""Real client libraries on foo: transformers, accelerate and peft give CPU's results.

Tiny randomly initialised models (built from config objects, nothing downloaded) train for a few steps
on foo and on CPU from identical weights and must end with identical losses and parameters; greedy
generation must produce identical tokens. These are the checks that found foo's defects with tied
weights (Parameters replaced by Module.to), SiLU gradients (composite kernels) and dropout (drawn from
the CPU generator)."""
import copy
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS = 4
VOCAB = 100


def gpt2(dropout=0.0):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return transformers.GPT2LMHeadModel(config)


def llama():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config)


def batches(count=STEPS):
    data = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (2, 12), generator=data) for _ in range(count)]


def train(model, device, optimizer=None, seed=None):
    """`model` (on CPU) trained on `device` with AdamW; the optimizer may be made before the move, as
    accelerate's prepare() does. `seed` seeds the generator of `device` alone (dropout)."""
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.to(device).train()
    if seed is not None:
        (torch.foo.manual_seed if device == "foo" else torch.default_generator.manual_seed)(seed)
    losses = []
    for ids in batches():
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {name: p.detach().cpu() for name, p in model.named_parameters()}


def assert_same_training(cpu, foo):
    (cpu_losses, cpu_params), (foo_losses, foo_params) = cpu, foo
    assert foo_losses == cpu_losses  # bit for bit
    assert cpu_params.keys() == foo_params.keys()
    for name in cpu_params:
        assert torch.equal(foo_params[name], cpu_params[name]), name


def initial(make):
    torch.manual_seed(0)
    return make()


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2_tied_embeddings", "llama_silu"])
def test_training_equals_cpu(make):
    model = initial(make)
    assert_same_training(train(copy.deepcopy(model), "cpu"), train(model, "foo"))


def test_tied_weights_stay_tied_and_an_optimizer_made_before_the_move_trains():
    model = initial(gpt2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # made on CPU, before the move
    cpu = train(copy.deepcopy(model), "cpu")
    foo = train(model, "foo", optimizer)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.device.type == "foo"
    assert_same_training(cpu, foo)


def test_dropout_draws_from_the_device_generator():
    model = initial(lambda: gpt2(dropout=0.1))
    cpu = train(copy.deepcopy(model), "cpu", seed=7)
    foo = train(model, "foo", seed=7)
    assert_same_training(cpu, foo)


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_greedy_generation_equals_cpu(make):
    model = initial(make).eval()
    prompt = batches(1)[0]
    expected = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    actual = model.to("foo").generate(prompt.to("foo"), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert actual.device.type == "foo"
    assert torch.equal(actual.cpu(), expected)


def test_peft_lora_training_equals_cpu():
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(initial(llama), config)
    assert_same_training(train(copy.deepcopy(model), "cpu"), train(model, "foo"))


def test_accelerate_prepares_on_foo_when_told_to():
    pytest.importorskip("accelerate")
    # accelerate's state is a process-wide singleton that reads ACCELERATE_TORCH_DEVICE once: a fresh process.
    script = """
import copy, torch, foo_backend, transformers
from accelerate import Accelerator
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
model = transformers.LlamaForCausalLM(config)
reference = copy.deepcopy(model)
accelerator = Accelerator()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer = accelerator.prepare(model, optimizer)
ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
data = torch.Generator().manual_seed(1)
for _ in range(3):
    ids = torch.randint(0, 100, (2, 12), generator=data)
    loss = model(input_ids=ids.to(accelerator.device), labels=ids.to(accelerator.device)).loss
    optimizer.zero_grad(); accelerator.backward(loss); optimizer.step()
    ref_loss = reference(input_ids=ids, labels=ids).loss
    ref_optimizer.zero_grad(); ref_loss.backward(); ref_optimizer.step()
    assert loss.item() == ref_loss.item()
print(accelerator.device, all(torch.equal(p.cpu(), r) for p, r in zip(model.parameters(), reference.parameters())))
"""
    env = {**os.environ, "ACCELERATE_TORCH_DEVICE": "foo", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["foo", "True"]
