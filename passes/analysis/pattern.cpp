#include <fsdp_opt/passes/pattern.h>

#include <fnmatch.h>

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

}  // namespace fsdp_opt
