// Runs an AOTInductor package compiled for foo, from C++ without Python: PyTorch's package loader, foo's device
// library. Its input is sin(0), sin(1), ... in a (rows x columns) float tensor on foo:<device>; it prints the
// output's device and shape, then its values, one per line.
//
//     python examples/aoti_cpp/build.py            # compiles this file: prints the program's path
//     run_package MODEL.pt2 ROWS COLUMNS [DEVICE]
#include <foo_backend/foo.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 ROWS COLUMNS [DEVICE]\n", argv[0]);
    return 2;
  }
  foo_backend_init();  // the "foo" device, as `import foo_backend` gives it to Python
  const int64_t rows = std::stoll(argv[2]), columns = std::stoll(argv[3]);
  const int device = argc > 4 ? std::stoi(argv[4]) : 0;

  torch::inductor::AOTIModelPackageLoader loader(argv[1], "model", /*run_single_threaded=*/false,
                                                 /*num_runners=*/1, static_cast<c10::DeviceIndex>(device));
  const at::Tensor input =
      at::arange(rows * columns, at::kFloat).sin().reshape({rows, columns}).to("foo:" + std::to_string(device));
  const std::vector<at::Tensor> outputs = loader.run({input});
  std::printf("%s", outputs.at(0).device().str().c_str());
  for (const int64_t size : outputs.at(0).sizes()) std::printf(" %lld", static_cast<long long>(size));
  std::printf("\n");
  const at::Tensor output = outputs.at(0).cpu().contiguous();  // waits for the model's kernels, as from CUDA
  const float* values = output.const_data_ptr<float>();
  for (int64_t i = 0; i < output.numel(); ++i) std::printf("%.9g\n", values[i]);
  return 0;
}
