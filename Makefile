# The README's Quick start: `make demo` and `make test` work on a fresh machine (they install first).
PYTHON ?= python

# Reinstall only when the build inputs change: an editable install recompiles every translation unit.
BUILD_INPUTS := setup.py requirements.txt requirements-dev.txt $(wildcard csrc/*/*.cpp csrc/*/*.h)
# One stamp per Python environment, so switching environments installs again.
STAMP := .install.$(shell $(PYTHON) -c "import hashlib, sys; print(hashlib.sha1(sys.prefix.encode()).hexdigest()[:10])").stamp

.PHONY: install demo test test-fast test-sanitizers bench

$(STAMP): $(BUILD_INPUTS)
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-build-isolation -e .
	$(PYTHON) -c "import foo_backend" && touch $(STAMP)

install: $(STAMP)

demo: install
	$(PYTHON) examples/train.py

test: install
	$(PYTHON) -m pytest tests -q

# A developer's inner loop: the tests that run in this process (no worlds of ranks, fresh interpreters,
# sanitizer builds or compiled graphs; tests/conftest.py lists them), OpInfo parity on one sample per op.
test-fast: install
	FOO_OPINFO_SAMPLES=1 $(PYTHON) -m pytest tests -q -m "not slow"

# The runtime's C API tests built with ThreadSanitizer, and with AddressSanitizer and UBSan (`make test`
# runs them too, in tests/test_runtime.py).
test-sanitizers: install
	$(PYTHON) -m pytest tests/test_runtime.py -q -k "tsan or asan"

bench: install
	$(PYTHON) benchmarks/ops.py
