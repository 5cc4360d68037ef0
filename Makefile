# The README's Quick start: `make demo` and `make test` work on a fresh machine (they install first).
PYTHON ?= python

.PHONY: install demo test bench

install:
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-build-isolation -e .

demo: install
	$(PYTHON) examples/train.py

test: install
	$(PYTHON) -m pytest tests -q

bench: install
	$(PYTHON) benchmarks/ops.py
