// The pipeline's options and module-path patterns: what the command line, Python and C++
// programs all parse through (include/fsdp_opt/passes/options.h, pattern.h).
#include <fsdp_opt/passes/options.h>
#include <fsdp_opt/passes/pattern.h>

#include <gtest/gtest.h>

namespace fsdp_opt {
namespace {

TEST(ModulePattern, StarMatchesWithinOneComponent) {
  EXPECT_TRUE(matchModulePattern("blocks.*", "blocks.0"));
  EXPECT_TRUE(matchModulePattern("blocks.*", "blocks.11"));
  EXPECT_FALSE(matchModulePattern("blocks.*", "blocks"));
  EXPECT_FALSE(matchModulePattern("blocks.*", "blocks.0.attn"));
  EXPECT_TRUE(matchModulePattern("*.*.a*", "blocks.0.attn"));
  EXPECT_FALSE(matchModulePattern("*.*.a*", "blocks.0.mlp"));
  EXPECT_TRUE(matchModulePattern("layer*", "layer4"));
  EXPECT_FALSE(matchModulePattern("*", ""));
}

TEST(ModulePattern, GlobstarMatchesAnyNumberOfComponents) {
  EXPECT_TRUE(matchModulePattern("**.attn", "blocks.0.attn"));
  EXPECT_TRUE(matchModulePattern("**.attn", "attn"));
  EXPECT_TRUE(matchModulePattern("encoder.**", "encoder.layers.3.mlp"));
  EXPECT_TRUE(matchModulePattern("encoder.**", "encoder"));
  EXPECT_FALSE(matchModulePattern("encoder.**", "decoder.layers.0"));
  EXPECT_TRUE(matchModulePattern("**", "a.b.c"));
}

TEST(ModulePattern, DotNamesOnlyTheRoot) {
  EXPECT_TRUE(matchModulePattern(".", ""));
  EXPECT_FALSE(matchModulePattern(".", "blocks"));
  EXPECT_FALSE(matchModulePattern("blocks", ""));
  EXPECT_EQ(displayPath(""), ".");
  EXPECT_EQ(joinPath("", "a"), "a");
  EXPECT_EQ(joinPath("a.b", "c"), "a.b.c");
}

TEST(ByteSize, BinaryAndDecimalSuffixes) {
  int64_t bytes = -1;
  ASSERT_TRUE(parseByteSize("1000", bytes));
  EXPECT_EQ(bytes, 1000);
  ASSERT_TRUE(parseByteSize("64KiB", bytes));
  EXPECT_EQ(bytes, 64 * 1024);
  ASSERT_TRUE(parseByteSize("512MiB", bytes));
  EXPECT_EQ(bytes, 512LL << 20);
  ASSERT_TRUE(parseByteSize("2GB", bytes));
  EXPECT_EQ(bytes, 2000000000LL);
  ASSERT_TRUE(parseByteSize("0", bytes));
  EXPECT_EQ(bytes, 0);
  ASSERT_TRUE(parseByteSize("7B", bytes));
  EXPECT_EQ(bytes, 7);
}

TEST(ByteSize, RejectsWhatIsNoSize) {
  int64_t bytes = 42;
  for (const char* text : {"", "lots", "-5", "1.5MiB", "5 MiB", "5mib", "MiB", "10KiBs"}) {
    EXPECT_FALSE(parseByteSize(text, bytes)) << text;
  }
  EXPECT_FALSE(parseByteSize("9999999999TiB", bytes));  // overflows int64
  EXPECT_FALSE(parseByteSize("1234567890123456789", bytes));
  EXPECT_EQ(bytes, 42);  // untouched on failure
}

TEST(ForwardMethodSpec, SplitsAtTheLastColon) {
  ForwardMethodSpec spec;
  ASSERT_TRUE(parseForwardMethodSpec(".:generate", spec));
  EXPECT_EQ(spec.pattern, ".");
  EXPECT_EQ(spec.method, "generate");
  ASSERT_TRUE(parseForwardMethodSpec("blocks.*:forward_features", spec));
  EXPECT_EQ(spec.pattern, "blocks.*");
  EXPECT_EQ(spec.method, "forward_features");
  for (const char* text : {"generate", ":generate", ".:", ""}) EXPECT_FALSE(parseForwardMethodSpec(text, spec)) << text;
}

TEST(Options, ApplySetsEveryField) {
  PipelineOptions options;
  EXPECT_EQ(applyOptions(options, {"--fsdp-unit=blocks.*", "--fsdp-unit=.", "--fsdp-unit-type=Block",
                                   "--fsdp-min-unit-params=1000", "--forward-method=.:generate",
                                   "--world-size=4", "--max-unsharded-bytes=1MiB", "--bucket-bytes=0",
                                   "--param-dtype=bf16"}),
            "");
  EXPECT_EQ(options.unitPatterns, (std::vector<std::string>{"blocks.*", "."}));
  EXPECT_EQ(options.unitTypes, std::vector<std::string>{"Block"});
  EXPECT_EQ(options.minUnitParams, 1000);
  ASSERT_EQ(options.forwardMethodSpecs.size(), 1u);
  EXPECT_EQ(options.forwardMethodSpecs[0].method, "generate");
  EXPECT_EQ(options.worldSize, 4);
  EXPECT_EQ(options.maxUnshardedBytes, 1 << 20);
  EXPECT_EQ(options.bucketBytes, 0);
  EXPECT_EQ(options.paramDtype, c10::ScalarType::BFloat16);
}

TEST(Options, ErrorsNameTheFlagAndTheValue) {
  PipelineOptions options;
  EXPECT_EQ(applyOption(options, "world-size", "0"), "--world-size must be at least 1, got 0");
  EXPECT_EQ(applyOption(options, "world-size", "two"), "--world-size expects an integer, got 'two'");
  EXPECT_EQ(applyOption(options, "world-size", "2.5"), "--world-size expects an integer, got '2.5'");
  EXPECT_EQ(applyOption(options, "param-dtype", "int8"), "--param-dtype expects bf16, fp16 or fp32, got 'int8'");
  EXPECT_EQ(applyOption(options, "max-unsharded-bytes", "lots"),
            "--max-unsharded-bytes expects a size like 4096, 64KiB or 512MiB, got 'lots'");
  EXPECT_EQ(applyOption(options, "fsdp-min-unit-params", "1e6"),
            "--fsdp-min-unit-params expects a number of parameter elements >= 1, got '1e6'");
  EXPECT_EQ(applyOption(options, "forward-method", "generate"), "--forward-method expects PATTERN:METHOD, got 'generate'");
  EXPECT_EQ(applyOption(options, "frobnicate", "1"), "unknown option '--frobnicate'");
  EXPECT_EQ(applyOptions(options, {"world-size=2"}), "expected an option spelled --name=value, got 'world-size=2'");
  EXPECT_EQ(options.worldSize, 1);  // nothing was set by the failures
}

TEST(Options, ShardGroupSizeMustDivideTheWorldSize) {
  PipelineOptions options;
  EXPECT_EQ(options.shardGroup(), 1);
  EXPECT_FALSE(options.hybrid());
  EXPECT_EQ(applyOptions(options, {"--shard-group-size=2", "--world-size=4"}), "");  // in any order
  EXPECT_EQ(options.shardGroup(), 2);
  EXPECT_TRUE(options.hybrid());
  PipelineOptions plain;
  EXPECT_EQ(applyOptions(plain, {"--world-size=4", "--shard-group-size=4"}), "");
  EXPECT_FALSE(plain.hybrid());
  PipelineOptions uneven;
  EXPECT_EQ(applyOptions(uneven, {"--world-size=4", "--shard-group-size=3"}),
            "--shard-group-size=3 does not divide --world-size=4 (W ranks form W / S shard groups of S ranks)");
  EXPECT_EQ(applyOption(uneven, "shard-group-size", "0"), "--shard-group-size must be at least 1, got 0");
}

TEST(Options, KeywordSpellingNamesThePythonKeyword) {
  // The same complaint, with the name the caller wrote: Python's transform(bucket_bytes=-5).
  PipelineOptions options;
  EXPECT_EQ(applyOption(options, "bucket-bytes", "-5", OptionSpelling::kKeyword),
            "bucket_bytes expects a size like 0, 64KiB or 25MiB, got '-5'");
  EXPECT_EQ(applyOption(options, "fsdp-unit", "", OptionSpelling::kKeyword),
            "units expects a module-path PATTERN, got ''");
  EXPECT_EQ(applyOptions(options, {"--world-size=0"}, OptionSpelling::kKeyword), "world_size must be at least 1, got 0");
  EXPECT_EQ(applyOptions(options, {"--world-size=4", "--shard-group-size=3"}, OptionSpelling::kKeyword),
            "shard_group_size=3 does not divide world_size=4 (W ranks form W / S shard groups of S ranks)");
  for (const OptionInfo& info : pipelineOptions()) {
    std::string keyword = info.keyword;
    EXPECT_FALSE(keyword.empty()) << info.name;
    EXPECT_EQ(keyword.find('-'), std::string::npos) << info.name;  // a Python identifier
  }
}

TEST(Options, EveryListedOptionIsAccepted) {
  // The table --help prints and applyOption parse agree: each listed name is known.
  for (const OptionInfo& info : pipelineOptions()) {
    PipelineOptions options;
    EXPECT_NE(applyOption(options, info.name, "x").rfind("unknown option", 0), 0u) << info.name;
  }
}

TEST(ParamDtype, Names) {
  c10::ScalarType dtype;
  ASSERT_TRUE(parseParamDtype("bfloat16", dtype));
  EXPECT_EQ(dtype, c10::ScalarType::BFloat16);
  ASSERT_TRUE(parseParamDtype("half", dtype));
  EXPECT_EQ(dtype, c10::ScalarType::Half);
  ASSERT_TRUE(parseParamDtype("fp32", dtype));
  EXPECT_EQ(dtype, c10::ScalarType::Float);
  EXPECT_FALSE(parseParamDtype("float64", dtype));
}

}  // namespace
}  // namespace fsdp_opt
