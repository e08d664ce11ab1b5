// A rank file saved with another file's code records (passes/output/shard_writer.cpp,
// saveReusingCode) holds, record for record, what torch::jit::save writes for that rank's module;
// fsdp-opt's rank files all take their code from one template and load as their rank's module.
#include <fsdp_opt/fsdp_opt.h>
#include <fsdp_opt/format.h>
#include <fsdp_opt/passes/output.h>

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>

namespace {

namespace fs = std::filesystem;

// Two classes of one name (the second is mangled), a parameter tied across two units, a buffer
// and a plain attribute: everything whose naming or sharing the data archive must reproduce.
torch::jit::Module makeModel() {
  torch::manual_seed(0);
  const at::Tensor tied = torch::randn({7, 4});
  torch::jit::Module first("__torch__.WriterTestLayer");
  first.register_parameter("w", tied, false);
  first.register_buffer("scale", torch::randn({7}));
  first.define("def forward(self, x):\n    return torch.matmul(x, self.w.t()) * self.scale\n");
  torch::jit::Module second("__torch__.WriterTestLayer");
  second.register_parameter("w", torch::randn({4, 7}), false);
  second.register_parameter("tied", tied, false);
  second.register_attribute("steps", c10::IntType::get(), int64_t(3));
  second.define(
      "def forward(self, x):\n"
      "    y = torch.tanh(torch.matmul(x, self.w.t()))\n"
      "    return y + torch.matmul(torch.matmul(y, self.tied.t()), self.tied).sum() * self.steps\n");
  torch::jit::Module root("__torch__.WriterTestRoot");
  root.register_parameter("bias", torch::randn({4}), false);
  root.register_module("first", first);
  root.register_module("second", second);
  root.define("def forward(self, x):\n    return self.second.forward(self.first.forward(x)) + self.bias\n");
  return root;
}

std::map<std::string, std::vector<char>> recordsOf(const std::string& file) {
  caffe2::serialize::PyTorchStreamReader reader(file);
  std::map<std::string, std::vector<char>> records;
  for (const std::string& name : reader.getAllRecords()) {
    if (name == ".data/serialization_id") continue;  // differs between any two saves
    const auto [data, size] = reader.getRecord(name);
    const char* bytes = static_cast<const char*>(data.get());
    records[name] = std::vector<char>(bytes, bytes + size);
  }
  return records;
}

class ShardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fsdp-shard-writer-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  // fsdp-opt's rank files of makeModel for `world` ranks, written into dir_/name; result_ and
  // options_ are what wrote them.
  fs::path writeRankFiles(int64_t world, const std::string& name);
  fs::path dir_;
  fsdp_opt::PipelineOptions options_;
  fsdp_opt::TransformResult result_;
};

fsdp_opt::TransformResult transformed(int64_t world, fsdp_opt::PipelineOptions& options) {
  options.unitPatterns = {".", "first", "second"};
  options.worldSize = world;
  return fsdp_opt::transform(makeModel(), options);
}

fs::path ShardWriterTest::writeRankFiles(int64_t world, const std::string& name) {
  result_ = transformed(world, options_);
  if (!result_.ok) throw std::runtime_error("the pipeline failed on the test model");
  const fs::path out = dir_ / name;
  fsdp_opt::writeOutput(result_, options_, out.string());
  return out;
}

std::string rankFile(const fs::path& dir, int64_t rank) {
  fs::create_directories(dir);
  return (dir / ("rank" + std::to_string(rank) + ".pt")).string();  // records are named after it
}

// Both saves of a rank's module are made in the same state: the pickler memoises an object only
// while something else references it, so the encoding (not the meaning) of data.pkl follows the
// references the caller holds.
TEST_F(ShardWriterTest, SavesWhatTorchSavesForEveryRank) {
  const int64_t world = 3;
  fsdp_opt::PipelineOptions options;
  fsdp_opt::TransformResult result = transformed(world, options);
  ASSERT_TRUE(result.ok);
  const std::string codeSource = rankFile(dir_ / "torch-before", 0);
  for (int64_t rank = 0; rank < world; ++rank) {
    fsdp_opt::makeRankModule(result.module, *result.plan, fsdp_opt::Mesh{world, world}, rank);
    result.module.setattr(fsdp_opt::kManifestHashAttr, std::string("not known yet"));
    if (rank == 0) {
      result.module.save(codeSource);
      ASSERT_TRUE(fsdp_opt::picklesAsSaved(result.module, codeSource));
    }
    // The hash set between the tensor records and data.pkl, as the writer does when the input's
    // hash is still on its way.
    const std::string reusing = rankFile(dir_ / "reusing", rank);
    bool called = false;
    fsdp_opt::saveReusingCode(result.module, codeSource, reusing, [&] {
      called = true;
      result.module.setattr(fsdp_opt::kManifestHashAttr, "hash of rank " + std::to_string(rank));
    });
    EXPECT_TRUE(called);
    const std::string bySave = rankFile(dir_ / "torch-after", rank);
    result.module.save(bySave);

    const auto want = recordsOf(bySave);
    const auto got = recordsOf(reusing);
    EXPECT_EQ(got.size(), want.size()) << "rank " << rank;
    for (const auto& [name, bytes] : want) {
      auto it = got.find(name);
      ASSERT_NE(it, got.end()) << "rank " << rank << " lacks record " << name;
      EXPECT_EQ(it->second, bytes) << "rank " << rank << ", record " << name;
    }
  }
}

TEST_F(ShardWriterTest, EveryRankFileReusesOneCodeTemplate) {
  const int64_t world = 3;
  const fs::path out = writeRankFiles(world, "sharded");
  fsdp_opt::TransformResult& result = result_;
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(out)) entries.push_back(entry.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"manifest.json", "rank0.pt", "rank1.pt", "rank2.pt"}));

  const auto first = recordsOf((out / "rank0.pt").string());
  for (int64_t rank = 0; rank < world; ++rank) {
    const std::string written = (out / ("rank" + std::to_string(rank) + ".pt")).string();
    for (const auto& [name, bytes] : recordsOf(written)) {
      if (name.rfind("code/", 0) == 0 || name == "constants.pkl") {
        EXPECT_EQ(bytes, first.at(name)) << "rank " << rank << ", record " << name;
      }
    }
    torch::jit::Module loaded = torch::jit::load(written);
    fsdp_opt::makeRankModule(result.module, *result.plan, fsdp_opt::Mesh{world, world}, rank);
    result.module.setattr(fsdp_opt::kManifestHashAttr, loaded.attr(fsdp_opt::kManifestHashAttr));
    // torch's save compresses code; the reused records are stored as they are, which is how this
    // test knows the rank took that path.
    const std::string bySave = rankFile(dir_ / ("torch-" + std::to_string(rank)), rank);
    result.module.save(bySave);
    EXPECT_GT(fs::file_size(written), fs::file_size(bySave)) << "rank " << rank;
    EXPECT_EQ(loaded.attr(fsdp_opt::kRankAttr).toInt(), rank);
    EXPECT_EQ(loaded.attr("second").toModule().attr("steps").toInt(), 3);
    const auto want = result.module.named_parameters();
    const auto got = loaded.named_parameters();
    ASSERT_EQ(got.size(), want.size());
    for (const auto& p : want) {
      bool found = false;
      for (const auto& q : got) {
        if (q.name != p.name) continue;
        found = true;
        EXPECT_TRUE(q.value.sizes() == p.value.sizes() && q.value.equal(p.value)) << "rank " << rank << ", " << p.name;
      }
      EXPECT_TRUE(found) << "rank " << rank << " lacks " << p.name;
    }
    EXPECT_TRUE(loaded.attr("first").toModule().attr("scale").toTensor().equal(
        result.module.attr("first").toModule().attr("scale").toTensor()));
    // A tie survives: one tensor in both slots.
    EXPECT_TRUE(loaded.attr("first").toModule().attr("w").toTensor().is_same(
        loaded.attr("second").toModule().attr("tied").toTensor()));
  }
}

TEST_F(ShardWriterTest, PicklingAnotherModuleDoesNotMatchTheSavedArchive) {
  const std::string saved = (dir_ / "model.pt").string();
  torch::jit::Module model = makeModel();
  model.save(saved);
  EXPECT_TRUE(fsdp_opt::picklesAsSaved(model, saved));
  model.setattr("bias", torch::zeros({4}));  // other bytes behind the same pickle
  EXPECT_TRUE(fsdp_opt::picklesAsSaved(model, saved));
  model.attr("second").toModule().setattr("steps", int64_t(300));  // another pickle
  EXPECT_FALSE(fsdp_opt::picklesAsSaved(model, saved));
  EXPECT_FALSE(fsdp_opt::picklesAsSaved(model, (dir_ / "missing.pt").string()));
}

// A write that fails is reported with the system's reason and the file's name, not the zip
// writer's "file write failed".
TEST_F(ShardWriterTest, AFailedWriteSaysWhy) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "this system has no /dev/full";
  fsdp_opt::PipelineOptions options;
  fsdp_opt::TransformResult result = transformed(2, options);
  ASSERT_TRUE(result.ok);
  const std::string codeSource = (dir_ / "code.pt").string();
  result.module.save(codeSource);
  try {
    fsdp_opt::saveReusingCode(result.module, codeSource, "/dev/full");
    FAIL() << "writing to /dev/full succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("full: " + std::string(std::strerror(ENOSPC))), std::string::npos) << e.what();
  }
}

// Rank files are written on threads of their own. When one of them fails (here: past the file
// size limit, which rank 0's file just exceeds, so that the code template before it fits), the
// error reaches the caller, the other writers are waited for and nothing is left behind.
TEST_F(ShardWriterTest, ARankFileThatCannotBeWrittenLeavesNothing) {
  const fs::path written = writeRankFiles(3, "written");
  const auto rankFileBytes = static_cast<rlim_t>(fs::file_size(written / "rank0.pt"));

  const fs::path failing = dir_ / "failing";
  struct rlimit before {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  struct rlimit limited = before;
  limited.rlim_cur = rankFileBytes - 1;
  auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string error;
  try {
    fsdp_opt::writeOutput(result_, options_, failing.string());
  } catch (const std::exception& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previousHandler);
  EXPECT_TRUE(error.find("rank0.pt: " + std::string(std::strerror(EFBIG))) != std::string::npos ||
              error.find("rank1.pt: " + std::string(std::strerror(EFBIG))) != std::string::npos ||
              error.find("rank2.pt: " + std::string(std::strerror(EFBIG))) != std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(failing));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir_)) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"written"});
}

}  // namespace
