#!/usr/bin/env bash
# `make test`'s second release: foo built against torch $1 (the supported release that this tree's own install
# does not use) and its release-dependent tests run there: the build, every patch guard (foo_backend/_patches.py)
# and the compile, graph, distributed and profiler tests, with torchvision's model where torchvision imports.
#
# It works in build/torch$1/: a venv that sees this Python's packages but has its own torch, and a copy of the
# working tree (the editable install of this tree stays built for the first release).
#     tools/test_other_release.sh 2.14.1 [pytest arguments, instead of the tests below]
set -euo pipefail
cd "$(dirname "$0")/.."
version=$1
shift
PYTHON=${PYTHON:-python}
home=build/torch$version
venv=$PWD/$home/venv
src=$home/src

if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    "$PYTHON" -m venv --system-site-packages "$venv"
    # --no-compile: Python compiles the modules the tests import, not all of torch (a third less time).
    "$venv/bin/python" -m pip install -q --no-compile "torch==$version" $(case $version in 2.14.*) echo torchvision==0.29.1;; esac)
fi

# The working tree as it is (tracked and untracked files git does not ignore), times kept so that ninja rebuilds
# only what changed since the last run.
mkdir -p "$src"
git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xpf - -C "$src"
cd "$src"
if [ -f "$venv/.foo_installed" ]; then
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 MAX_JOBS=2 "$venv/bin/python" setup.py -q build_ext --inplace
else  # the entry point that autoloads foo with torch, and the build
    MAX_JOBS=2 "$venv/bin/python" -m pip install -q --no-build-isolation -e . && touch "$venv/.foo_installed"
fi

if [ $# -eq 0 ]; then
    files="tests/test_patches.py tests/test_inductor.py tests/test_graph_trees.py tests/test_graphs.py
           tests/test_distributed.py tests/test_distributed_training.py tests/test_profiler.py"
    # The patch guards that live in other files.
    guards=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -c "
import sys
from foo_backend import _patches
guards = {patch.guard for patch in _patches.PATCHES.values()}
print(' '.join(sorted(g for g in guards if g.split('::')[0] not in sys.argv[1:])))" $files)
    set -- $files $guards tests/test_client_libraries.py::test_torchvision_resnet18_training_equals_cpu
fi
echo "torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'): pytest $*"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
