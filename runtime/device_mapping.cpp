#include "device_mapping.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

std::string devices(int n) {
  return std::to_string(n) + (n == 1 ? " CUDA device" : " CUDA devices");
}

// How to map ranks to devices when one-GPU-per-local-rank does not fit.
const char* const kOverrideHint =
    "; set FSDP_OPT_CUDA_DEVICE to a device index, or to 'tensors' to use the device the "
    "parameters are on";

bool parseIndex(const std::string& s, int& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  const long v = std::strtol(s.c_str(), nullptr, 10);
  if (errno != 0 || v > INT_MAX) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

CudaDeviceChoice chooseCudaDevice(const CudaDeviceEnv& env, int tensorDevice, int visibleDevices) {
  CudaDeviceChoice c;
  if (!env.override.empty()) {
    c.origin = "FSDP_OPT_CUDA_DEVICE=" + env.override;
    if (env.override == "tensors") {
      c.device = tensorDevice;  // the parameters exist there, so the device does
      return c;
    }
    if (!parseIndex(env.override, c.device)) {
      c.error = "FSDP_OPT_CUDA_DEVICE='" + env.override +
                "' is neither a device index (0, 1, ...) nor 'tensors'";
      return c;
    }
    if (c.device >= visibleDevices) {
      c.error = "FSDP_OPT_CUDA_DEVICE=" + env.override + " names cuda:" + env.override +
                ", but this process sees " + devices(visibleDevices) +
                " (check CUDA_VISIBLE_DEVICES)";
    }
  } else if (env.localRank) {
    c.origin = "LOCAL_RANK=" + std::to_string(*env.localRank);
    c.device = *env.localRank;
    if (env.localWorldSize && *env.localWorldSize > visibleDevices) {
      c.error = "this node runs " + std::to_string(*env.localWorldSize) +
                " ranks (LOCAL_WORLD_SIZE) but this process sees " + devices(visibleDevices) +
                ", and each rank uses cuda:LOCAL_RANK: " +
                (visibleDevices == 0 ? std::string("check CUDA_VISIBLE_DEVICES and the driver")
                                     : "start at most " + std::to_string(visibleDevices) +
                                           " ranks per node" + kOverrideHint);
    } else if (c.device >= visibleDevices) {
      c.error = "LOCAL_RANK=" + std::to_string(*env.localRank) + " maps this rank to cuda:" +
                std::to_string(c.device) + ", but this process sees " + devices(visibleDevices) +
                " (more ranks on this node than visible GPUs, or CUDA_VISIBLE_DEVICES narrowed "
                "each rank to its own GPU)" + kOverrideHint;
    }
  } else {
    c.origin = "the parameters' device";
    c.device = tensorDevice;
    return c;
  }
  if (c.error.empty() && c.device != tensorDevice) {
    c.error = "parameters are on cuda:" + std::to_string(tensorDevice) +
              " but this rank's device is cuda:" + std::to_string(c.device) + " (" + c.origin +
              "); move the model to cuda:" + std::to_string(c.device);
  }
  return c;
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
