#!/usr/bin/env bash
# `make test`'s second release: foo built against torch $1 (the supported release that this tree's own install
# does not use) and its release-dependent tests run there: the build, every patch guard (foo_backend/_patches.py)
# and the compile, graph, distributed and profiler tests, with torchvision's model where torchvision imports.
#
# The venv (this Python's packages, its own torch) lives in ~/.cache/foo_backend/torch$1/ and is made on first
# use; a copy of the working tree is built in build/torch$1/ (this tree's editable install stays built for the
# first release).
#     tools/test_other_release.sh 2.14.1 [pytest arguments, instead of the tests below]
set -euo pipefail
cd "$(dirname "$0")/.."
version=$1
shift
PYTHON=${PYTHON:-python}
venv=${XDG_CACHE_HOME:-$HOME/.cache}/foo_backend/torch$version/venv
src=$PWD/build/torch$version

if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -c \
        "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    "$PYTHON" -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q "torch==$version" \
        $(case $version in 2.14.*) echo torchvision==0.29.1;; esac)
fi

# The working tree as it is (tracked and untracked files git does not ignore), times kept so that ninja rebuilds
# only what changed since the last run.
mkdir -p "$src"
git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xpf - -C "$src"
cd "$src"
if [ "$(cat "$venv/foo_backend_source" 2>/dev/null)" = "$src" ]; then
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 MAX_JOBS=2 "$venv/bin/python" setup.py -q build_ext --inplace
else  # the build, and the entry point that autoloads this copy of foo with torch
    MAX_JOBS=2 "$venv/bin/python" -m pip install -q --no-build-isolation -e .
    echo "$src" > "$venv/foo_backend_source"
fi

if [ $# -eq 0 ]; then
    # What depends on the release: the patch guards, the compile, graph and profiler tests, and of
    # torch.distributed the ways to start a group and the training worlds (DDP, FSDP2, DeviceMesh, DTensor);
    # the collectives' own semantics are fccl's C++ over gloo, tested on the first release.
    files="tests/test_patches.py tests/test_inductor.py tests/test_cpp_wrapper.py tests/test_aot_inductor.py
           tests/test_graph_trees.py tests/test_graphs.py
           tests/test_distributed_training.py tests/test_profiler.py"
    guards=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -c "
import sys
from foo_backend import _patches
guards = {patch.guard for patch in _patches.PATCHES.values()}
print(' '.join(sorted(g for g in guards if g.split('::')[0] not in sys.argv[1:])))" $files)
    set -- $files $guards "tests/test_distributed.py::test_init_process_group_forms" \
        tests/test_client_libraries.py::test_torchvision_resnet18_training_equals_cpu
fi
echo "torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'): pytest $*"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
