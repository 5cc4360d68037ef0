"""Train a bag-of-words classifier with sparse embedding gradients on foo, and check it learns what CPU learns.

nn.EmbeddingBag(sparse=True) gives its weight a sparse COO gradient (only the rows a batch used), which
SparseAdam updates; the dense layer uses Adam. The same training runs on CPU and on foo from the same
initial weights over the same batches, and both must end with the same weights. A sparse x dense product
(torch.sparse.mm) on the trained embedding shows a sparse tensor built directly on foo.

Run:  python examples/sparse_embedding.py
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import foo_backend  # noqa: F401  (registers the "foo" device; plain `import torch` does too, via autoload)

VOCABULARY, DIM, CLASSES, STEPS, BATCH, WORDS = 1000, 16, 4, 30, 32, 12


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCABULARY, DIM, mode="mean", sparse=True)
        self.classify = nn.Linear(DIM, CLASSES)

    def forward(self, words):
        return self.classify(self.embedding(words))


def make_batches():
    """Documents of WORDS word ids; a document's class is decided by the words it uses."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(STEPS):
        words = torch.randint(0, VOCABULARY, (BATCH, WORDS), generator=generator)
        labels = (words % CLASSES).mode(dim=1).values
        batches.append((words, labels))
    return batches


def train(model, batches, device):
    model = model.to(device)
    sparse_optimizer = torch.optim.SparseAdam(list(model.embedding.parameters()), lr=0.05)
    dense_optimizer = torch.optim.Adam(list(model.classify.parameters()), lr=0.05)
    losses = []
    for words, labels in batches:
        loss = F.cross_entropy(model(words.to(device)), labels.to(device))
        loss.backward()
        assert model.embedding.weight.grad.layout == torch.sparse_coo  # only the rows this batch used
        sparse_optimizer.step()
        dense_optimizer.step()
        sparse_optimizer.zero_grad()
        dense_optimizer.zero_grad()
        losses.append(loss.item())
    return model, losses


def main():
    torch.manual_seed(0)
    initial = BagOfWords()
    batches = make_batches()
    cpu_model, cpu_losses = train(copy.deepcopy(initial), batches, "cpu")
    foo_model, foo_losses = train(copy.deepcopy(initial), batches, "foo")
    print(f"loss on CPU: {cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f}")
    print(f"loss on foo: {foo_losses[0]:.4f} -> {foo_losses[-1]:.4f}")
    for (name, cpu_param), foo_param in zip(cpu_model.named_parameters(), foo_model.parameters()):
        torch.testing.assert_close(foo_param.cpu(), cpu_param, msg=f"{name} differs between foo and CPU")

    # A sparse matrix built on foo: each document as the average of its words' one-hot rows.
    words, _ = batches[0]
    rows = torch.arange(BATCH).repeat_interleave(WORDS)
    documents = torch.sparse_coo_tensor(torch.stack([rows, words.flatten()]), torch.full((BATCH * WORDS,), 1.0 / WORDS),
                                        (BATCH, VOCABULARY), device="foo", check_invariants=True).coalesce()
    embedded = torch.sparse.mm(documents, foo_model.embedding.weight)  # = the EmbeddingBag's mean
    torch.testing.assert_close(embedded, foo_model.embedding(words.to("foo")))
    print(f"sparse documents on {documents.device}: {documents._nnz()} stored entries, layout {documents.layout}")
    print("OK: sparse training on foo matches CPU")


if __name__ == "__main__":
    main()
