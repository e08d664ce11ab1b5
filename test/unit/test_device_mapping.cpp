// Unit tests of the CUDA device a rank's communicator uses (runtime/device_mapping.h):
// cuda:LOCAL_RANK by default, FSDP_OPT_CUDA_DEVICE overriding it, and one clear error naming
// both numbers when a node runs more ranks than it has visible GPUs.
#include "../../runtime/device_mapping.h"

#include <gtest/gtest.h>

using fsdp_opt::runtime::detail::chooseCudaDevice;
using fsdp_opt::runtime::detail::CudaDeviceEnv;

namespace {

CudaDeviceEnv torchrun(int localRank, int localWorldSize) {
  CudaDeviceEnv env;
  env.localRank = localRank;
  env.localWorldSize = localWorldSize;
  return env;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(DeviceMapping, LocalRankPicksItsGpu) {
  const auto c = chooseCudaDevice(torchrun(2, 4), 2, 4);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.device, 2);
  EXPECT_EQ(c.origin, "LOCAL_RANK=2");
}

TEST(DeviceMapping, ParametersOnAnotherGpuAreNamed) {
  const auto c = chooseCudaDevice(torchrun(1, 4), 0, 4);
  EXPECT_TRUE(has(c.error, "parameters are on cuda:0 but this rank's device is cuda:1 (LOCAL_RANK=1)"))
      << c.error;
  EXPECT_TRUE(has(c.error, "move the model to cuda:1")) << c.error;
}

TEST(DeviceMapping, MoreRanksPerNodeThanGpusNamesBothNumbers) {
  // Rank 0 would find its GPU, but the job cannot work: every rank says so at once.
  for (int localRank : {0, 5}) {
    const auto c = chooseCudaDevice(torchrun(localRank, 8), localRank, 4);
    EXPECT_TRUE(has(c.error, "this node runs 8 ranks (LOCAL_WORLD_SIZE) but this process sees 4 CUDA devices"))
        << c.error;
    EXPECT_TRUE(has(c.error, "start at most 4 ranks per node")) << c.error;
    EXPECT_TRUE(has(c.error, "FSDP_OPT_CUDA_DEVICE")) << c.error;
  }
}

TEST(DeviceMapping, LocalRankBeyondTheVisibleGpus) {
  // No LOCAL_WORLD_SIZE (a launcher other than torchrun), or CUDA_VISIBLE_DEVICES narrowed to
  // one GPU per rank.
  CudaDeviceEnv env;
  env.localRank = 3;
  const auto c = chooseCudaDevice(env, 0, 1);
  EXPECT_TRUE(has(c.error, "LOCAL_RANK=3 maps this rank to cuda:3, but this process sees 1 CUDA device "))
      << c.error;
  EXPECT_TRUE(has(c.error, "FSDP_OPT_CUDA_DEVICE")) << c.error;
  // ... which FSDP_OPT_CUDA_DEVICE resolves.
  env.override = "0";
  const auto fixed = chooseCudaDevice(env, 0, 1);
  EXPECT_EQ(fixed.error, "");
  EXPECT_EQ(fixed.device, 0);
  EXPECT_EQ(fixed.origin, "FSDP_OPT_CUDA_DEVICE=0");
}

TEST(DeviceMapping, OverrideByIndex) {
  CudaDeviceEnv env = torchrun(0, 2);
  env.override = "1";
  EXPECT_EQ(chooseCudaDevice(env, 1, 2).device, 1);
  EXPECT_EQ(chooseCudaDevice(env, 1, 2).error, "");
  EXPECT_TRUE(has(chooseCudaDevice(env, 0, 2).error, "parameters are on cuda:0 but this rank's device is cuda:1 (FSDP_OPT_CUDA_DEVICE=1)"));
  env.override = "2";
  EXPECT_TRUE(has(chooseCudaDevice(env, 1, 2).error, "FSDP_OPT_CUDA_DEVICE=2 names cuda:2, but this process sees 2 CUDA devices"));
}

TEST(DeviceMapping, OverrideByTheTensorsDevice) {
  CudaDeviceEnv env = torchrun(3, 8);  // would be an error without the override
  env.override = "tensors";
  const auto c = chooseCudaDevice(env, 0, 1);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.device, 0);
}

TEST(DeviceMapping, MalformedOverrideIsAnError) {
  for (const char* bad : {"cuda:1", "-1", "1x", "auto", "99999999999"}) {
    CudaDeviceEnv env;
    env.override = bad;
    const auto c = chooseCudaDevice(env, 0, 1);
    EXPECT_TRUE(has(c.error, "is neither a device index (0, 1, ...) nor 'tensors'")) << bad << ": " << c.error;
  }
}

TEST(DeviceMapping, WithoutLocalRankTheParametersDecide) {
  const auto c = chooseCudaDevice(CudaDeviceEnv{}, 3, 4);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.device, 3);
}
