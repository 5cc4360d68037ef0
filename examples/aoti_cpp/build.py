"""Compiles run_package.cpp against the installed torch and foo_backend's device library; prints the program.

    python examples/aoti_cpp/build.py [OUTPUT]

The program links libtorch and foo_backend/lib/libfoo_backend.so (no Python): what a C++ deployment of an
AOTInductor package for foo needs.
"""
import os
import subprocess
import sys

import torch
import torch.utils.cpp_extension as cpp_extension

import foo_backend
from foo_backend import _releases


def build(output):
    package = os.path.dirname(foo_backend.__file__)
    foo_lib = os.path.join(package, "lib")
    standard = _releases.CXX_STANDARD[_releases.release_of(torch.__version__)]
    command = ["g++", f"-std={standard}", "-O1", os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_package.cpp"),
               "-o", output, "-I", os.path.join(package, "include"),
               *(f"-I{path}" for path in cpp_extension.include_paths()),
               f"-L{cpp_extension.TORCH_LIB_PATH}", f"-L{foo_lib}",
               f"-Wl,-rpath,{cpp_extension.TORCH_LIB_PATH}:{foo_lib}",
               "-Wl,--no-as-needed", "-lfoo_backend", "-ltorch", "-ltorch_cpu", "-lc10"]
    subprocess.run(command, check=True)
    return output


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else os.path.abspath("run_package")))
