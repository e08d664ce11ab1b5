// The one parser of pipeline options: fsdp-opt's flags, the Python keywords (which arrive as
// "--name=value" items) and C++ programs all end here. A setter says only what is wrong with a
// value ("must be at least 1, got 0"); applyOption puts the option's name in front, spelled as
// the caller spells it (a flag or a Python keyword), so each text is written once.
#include <fsdp_opt/passes/options.h>

#include <cctype>
#include <charconv>
#include <climits>
#include <functional>

namespace fsdp_opt {
namespace {

bool parseInt(const std::string& text, int64_t& value) {
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  return !text.empty() && error == std::errc() && stop == end;
}

using Setter = std::function<std::string(PipelineOptions&, const std::string&)>;

struct OptionEntry {
  OptionInfo info;
  Setter set;
};

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// A count of ranks (--world-size, --shard-group-size): "" and `out` set, or what is wrong.
std::string parseRankCount(const std::string& text, int64_t& out) {
  int64_t n = 0;
  if (!parseInt(text, n)) return "expects an integer, got " + quoted(text);
  if (n < 1) return "must be at least 1, got " + text;
  out = n;
  return "";
}

const std::vector<OptionEntry>& optionEntries() {
  static const std::vector<OptionEntry> entries = {
      {{"fsdp-unit", "units", "PATTERN",
        "designate FSDP units by module path (`*` one component, `**` any depth, `.` the root)", true},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         if (v.empty()) return "expects a module-path PATTERN, got ''";
         o.unitPatterns.push_back(v);
         return "";
       }},
      {{"fsdp-unit-type", "unit_types", "NAME",
        "every instance of this module class is a unit (TorchScript qualified name or its last "
        "component, e.g. Block)", true},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         if (v.empty()) return "expects a module class NAME, got ''";
         o.unitTypes.push_back(v);
         return "";
       }},
      {{"fsdp-min-unit-params", "min_unit_params", "N",
        "units by size (FSDP1's size_based_auto_wrap_policy): each module with N or more parameter "
        "elements outside nested units, and the root", false},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         int64_t n = 0;
         if (!parseInt(v, n) || n < 1) {
           return "expects a number of parameter elements >= 1, got " + quoted(v);
         }
         o.minUnitParams = n;
         return "";
       }},
      {{"forward-method", "forward_methods", "PATTERN:METHOD", "register a forward method of the units PATTERN matches", true},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         ForwardMethodSpec spec;
         if (!parseForwardMethodSpec(v, spec)) return "expects PATTERN:METHOD, got " + quoted(v);
         o.forwardMethodSpecs.push_back(spec);
         return "";
       }},
      {{"world-size", "world_size", "N", "shard for N ranks (default 1)", false},
       [](PipelineOptions& o, const std::string& v) { return parseRankCount(v, o.worldSize); }},
      {{"shard-group-size", "shard_group_size", "S",
        "hybrid sharding: shard units over groups of S consecutive ranks, replicate across groups (default: W)",
        false},
       [](PipelineOptions& o, const std::string& v) {
         int64_t n = 0;
         std::string error = parseRankCount(v, n);
         if (error.empty()) o.shardGroupSize = n;
         return error;
       }},
      {{"max-unsharded-bytes", "max_unsharded_bytes", "SIZE",
        "bound on the peak of unsharded parameter bytes (e.g. 512MiB; default: none)", false},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         int64_t bytes = 0;
         if (!parseByteSize(v, bytes)) {
           return "expects a size like 4096, 64KiB or 512MiB, got " + quoted(v);
         }
         o.maxUnshardedBytes = bytes;
         return "";
       }},
      {{"bucket-bytes", "bucket_bytes", "SIZE",
        "merge adjacent gathers into one collective up to this size (default 25MiB; 0 turns it off)", false},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         if (!parseByteSize(v, o.bucketBytes)) {
           return "expects a size like 0, 64KiB or 25MiB, got " + quoted(v);
         }
         return "";
       }},
      {{"param-dtype", "param_dtype", "DTYPE",
        "gather unit parameters in this dtype (bf16, fp16 or fp32); shards keep their own", false},
       [](PipelineOptions& o, const std::string& v) -> std::string {
         c10::ScalarType dtype;
         if (!parseParamDtype(v, dtype)) return "expects bf16, fp16 or fp32, got " + quoted(v);
         o.paramDtype = dtype;
         return "";
       }},
  };
  return entries;
}

}  // namespace

const std::vector<OptionInfo>& pipelineOptions() {
  static const std::vector<OptionInfo> infos = [] {
    std::vector<OptionInfo> list;
    for (const auto& entry : optionEntries()) list.push_back(entry.info);
    return list;
  }();
  return infos;
}

namespace {

// The option `name` (without dashes) as the caller spells it in an error.
std::string spelledOption(const std::string& name, OptionSpelling spelling) {
  if (spelling == OptionSpelling::kKeyword) {
    for (const auto& entry : optionEntries()) {
      if (name == entry.info.name) return entry.info.keyword;
    }
  }
  return "--" + name;
}

}  // namespace

std::string applyOption(PipelineOptions& options, const std::string& name, const std::string& value,
                        OptionSpelling spelling) {
  for (const auto& entry : optionEntries()) {
    if (name != entry.info.name) continue;
    std::string complaint = entry.set(options, value);
    return complaint.empty() ? "" : spelledOption(name, spelling) + " " + complaint;
  }
  return "unknown option '--" + name + "'";
}

std::string applyOptions(PipelineOptions& options, const std::vector<std::string>& items, OptionSpelling spelling) {
  for (const auto& item : items) {
    size_t equals = item.find('=');
    if (item.rfind("--", 0) != 0 || equals == std::string::npos) {
      return "expected an option spelled --name=value, got " + quoted(item);
    }
    std::string error = applyOption(options, item.substr(2, equals - 2), item.substr(equals + 1), spelling);
    if (!error.empty()) return error;
  }
  return checkOptions(options, spelling);
}

std::string checkOptions(const PipelineOptions& options, OptionSpelling spelling) {
  if (options.shardGroupSize && options.worldSize % *options.shardGroupSize != 0) {
    return spelledOption("shard-group-size", spelling) + "=" + std::to_string(*options.shardGroupSize) +
           " does not divide " + spelledOption("world-size", spelling) + "=" + std::to_string(options.worldSize) +
           " (W ranks form W / S shard groups of S ranks)";
  }
  return "";
}

bool parseForwardMethodSpec(const std::string& text, ForwardMethodSpec& out) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  out.pattern = text.substr(0, colon);
  out.method = text.substr(colon + 1);
  return true;
}

bool parseParamDtype(const std::string& text, c10::ScalarType& dtype) {
  static const std::pair<const char*, c10::ScalarType> kNames[] = {
      {"bf16", c10::ScalarType::BFloat16}, {"bfloat16", c10::ScalarType::BFloat16},
      {"fp16", c10::ScalarType::Half},     {"float16", c10::ScalarType::Half},
      {"half", c10::ScalarType::Half},     {"fp32", c10::ScalarType::Float},
      {"float32", c10::ScalarType::Float}};
  for (const auto& [name, type] : kNames) {
    if (text == name) {
      dtype = type;
      return true;
    }
  }
  return false;
}

bool parseByteSize(const std::string& text, int64_t& bytes) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return false;
  int64_t value = std::stoll(text.substr(0, digits));
  static const std::pair<const char*, int64_t> kSuffixes[] = {
      {"", 1},          {"B", 1},
      {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40},
      {"KB", 1000LL}, {"MB", 1000LL * 1000}, {"GB", 1000LL * 1000 * 1000},
      {"TB", 1000LL * 1000 * 1000 * 1000}};
  std::string suffix = text.substr(digits);
  for (const auto& [name, scale] : kSuffixes) {
    if (suffix != name) continue;
    if (value > INT64_MAX / scale) return false;
    bytes = value * scale;
    return true;
  }
  return false;
}

}  // namespace fsdp_opt
