// The runtime tests' program: `runtime_tests --list` names the tests that tests/runtime/test_*.cpp
// registered, `runtime_tests NAME` runs one (harness.h).
#include "harness.h"

#include <cstdio>
#include <cstring>

using runtime_tests::tests;

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& [name, test] : tests()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc != 2 || tests().count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: runtime_tests --list | TEST\n");
    return 2;
  }
  tests()[argv[1]]();
  return 0;
}
