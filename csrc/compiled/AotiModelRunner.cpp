// The runner of AOTInductor models compiled for foo: what torch._inductor.aoti_load_package and C++'s
// AOTIModelPackageLoader create for a package whose device is "foo" (PyTorch's registry of model runners by
// device type; PyTorch registers CPU's, CUDA's, XPU's and MPS's).
//
// A model's library runs the AOTI runtime's headers, which know those four devices: its base class parses
// only their names, and loads the constants packaged in the library into host memory for any other device.
// foo's generated model (FooCppWrapperCodegen) gives its base class "cpu" for "foo", declares its constants CPU
// tensors and runs on their copies on its foo device (foo_aoti_device_constant), which this runner makes when
// it loads the model. It refuses a library not compiled for foo, or for another version of foo's C functions.
#include <ATen/DynamicLibrary.h>
#include <c10/core/Device.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <foo_backend/aoti.h>

#include <string>

#include "device/Common.h"

namespace foo {
namespace {

// "foo" or "foo:i": the model's device, its index resolved now.
c10::Device resolvedDevice(const std::string& device_str) {
  c10::Device device(device_str);
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "foo: an AOTInductor package for ", device_str,
              " is not foo's");
  const c10::DeviceIndex index = device.has_index() ? device.index() : currentDevice();
  checkDeviceIndex(index);
  return fooDevice(index);
}

// The model's library, refused before any of its code runs unless it was compiled for foo's C functions as they
// are (aoti.h's FOO_AOTI_ABI_VERSION, which the generated code exports).
const std::string& checkedModel(const std::string& path) {
  at::DynamicLibrary model(path.c_str(), nullptr, /*leak_handle=*/false);
  void* symbol = nullptr;
  try {
    symbol = model.sym("foo_aoti_model_abi_version");
  } catch (const c10::Error&) {
  }
  TORCH_CHECK(symbol != nullptr, "foo: the AOTInductor model ", path, " was not compiled for foo by foo_backend");
  const int64_t version = reinterpret_cast<int64_t (*)()>(symbol)();
  TORCH_CHECK(version == FOO_AOTI_ABI_VERSION, "foo: the AOTInductor model ", path, " was compiled by a "
              "foo_backend whose calls from generated code are version ", version, "; this foo_backend's are "
              "version ", FOO_AOTI_ABI_VERSION, ": compile the model again with this foo_backend");
  return path;
}

class FooModelContainerRunner : public torch::inductor::AOTIModelContainerRunner {
 public:
  FooModelContainerRunner(const std::string& model_so_path, size_t num_models, const c10::Device& device,
                          const std::string& cubin_dir, bool run_single_threaded)
      : AOTIModelContainerRunner(checkedModel(model_so_path), num_models, device.str(), cubin_dir,
                                 run_single_threaded) {
    // The model's constants go to its device now, not at its first run.
    const c10::DeviceIndex index = device.index();
    for (const auto& [fqn, constant] : extract_constants_map(/*use_inactive=*/false)) {
      AtenTensorHandle on_device = nullptr;
      AOTI_TORCH_ERROR_CODE_CHECK(foo_aoti_device_constant(
          torch::aot_inductor::tensor_pointer_to_tensor_handle(const_cast<at::Tensor*>(&constant)), index,
          &on_device));
      AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_delete_tensor_object(on_device));
    }
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> createRunner(const std::string& model_so_path,
                                                                        size_t num_models,
                                                                        const std::string& device_str,
                                                                        const std::string& cubin_dir,
                                                                        const bool run_single_threaded) {
  return std::make_unique<FooModelContainerRunner>(model_so_path, num_models, resolvedDevice(device_str), cubin_dir,
                                                   run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner registerRunner("foo", &createRunner);

}  // namespace
}  // namespace foo
