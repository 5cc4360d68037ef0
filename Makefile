# The README's Quick start: `make demo` and `make test` work on a fresh machine (they install first).
PYTHON ?= python

# Reinstall only when the build inputs change: an editable install recompiles every translation unit.
BUILD_INPUTS := setup.py requirements.txt requirements-dev.txt $(wildcard csrc/*/*.cpp csrc/*/*.h) \
	tools/generate_aoti_shim.py $(wildcard foo_backend/include/foo_backend/*.h)
# The torch release to build against (foo_backend/_releases.py lists the supported ones): the installed torch
# when foo supports it, else 2.13.0; `make test TORCH=2.14.1` chooses (README: "Choosing a torch release").
RELEASES := runpy.run_path('foo_backend/_releases.py')
TORCH ?= $(shell TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PYTHON) -c "import runpy, torch; v = torch.__version__.split('+')[0]; print('' if $(RELEASES)['unsupported'](v) else v)" 2>/dev/null | grep . || $(PYTHON) -c "import runpy; print($(RELEASES)['TESTED_TORCH']['2.13'])")
# The other supported release, which `make test` builds and tests too (tools/test_other_release.sh).
OTHER_TORCH := $(shell $(PYTHON) -c "import runpy; print($(RELEASES)['other_tested_torch']('$(TORCH)'))")
# torchvision where one imports beside that torch (0.29.1 beside 2.14.1; none beside 2.13).
TORCHVISION := $(if $(filter 2.14.%,$(TORCH)),torchvision==0.29.1)
# One stamp per Python environment and torch, so switching either installs again.
STAMP := .install.$(shell $(PYTHON) -c "import hashlib, sys; print(hashlib.sha1(sys.prefix.encode()).hexdigest()[:10])").torch$(TORCH).stamp

.PHONY: install demo test test-other-release test-fast test-sanitizers bench

$(STAMP): $(BUILD_INPUTS)
	$(PYTHON) -m pip install -q torch==$(TORCH) $(TORCHVISION)
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-build-isolation -e .
	$(PYTHON) -c "import foo_backend" && touch $(STAMP)

install: $(STAMP)

demo: install
	$(PYTHON) examples/train.py

# The whole suite on this torch, then the other release's build, patch guards and compile, graph, distributed
# and profiler tests (`make test-other-release` alone).
test: install
	$(PYTHON) -m pytest tests -q
	$(MAKE) test-other-release

test-other-release:
	PYTHON=$(PYTHON) tools/test_other_release.sh $(OTHER_TORCH)

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
