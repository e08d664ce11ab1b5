#include <fsdp_opt/options.h>
#include <fsdp_opt/pattern.h>

#include <fnmatch.h>

#include <cctype>
#include <climits>

#include <vector>

namespace fsdp_opt {
namespace {

std::vector<std::string> splitDots(const std::string& text) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  size_t start = 0;
  while (true) {
    size_t dot = text.find('.', start);
    parts.push_back(text.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

bool matchComponents(const std::vector<std::string>& pattern, size_t p,
                     const std::vector<std::string>& path, size_t q) {
  if (p == pattern.size()) return q == path.size();
  if (pattern[p] == "**") {
    for (size_t skip = q; skip <= path.size(); ++skip) {
      if (matchComponents(pattern, p + 1, path, skip)) return true;
    }
    return false;
  }
  if (q == path.size()) return false;
  // Within a component `*` never crosses a dot, since components hold none.
  if (fnmatch(pattern[p].c_str(), path[q].c_str(), 0) != 0) return false;
  return matchComponents(pattern, p + 1, path, q + 1);
}

}  // namespace

bool matchModulePattern(const std::string& pattern, const std::string& modulePath) {
  if (pattern == ".") return modulePath.empty();
  return matchComponents(splitDots(pattern), 0, splitDots(modulePath), 0);
}

std::string joinPath(const std::string& parent, const std::string& name) {
  if (name.empty()) return parent;
  return parent.empty() ? name : parent + "." + name;
}

std::string displayPath(const std::string& modulePath) {
  return modulePath.empty() ? "." : modulePath;
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
