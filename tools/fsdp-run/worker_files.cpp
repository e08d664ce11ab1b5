#include "worker_files.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace fsdp_run {
namespace {

std::string rankFile(const std::string& dir, int rank, const char* suffix) {
  return dir + "/rank" + std::to_string(rank) + suffix;
}

constexpr const char* kKindTag = "kind: ";
constexpr const char* kMessageTag = "message: ";

}  // namespace

std::string outputFile(const std::string& dir, int rank) { return rankFile(dir, rank, ".out.pt"); }
std::string runOutputFile(const std::string& dir, int rank, int run) {
  return rankFile(dir, rank, (".run" + std::to_string(run) + ".out.pt").c_str());
}
std::string statsFile(const std::string& dir, int rank) { return rankFile(dir, rank, ".stats"); }
std::string errorFile(const std::string& dir, int rank) { return rankFile(dir, rank, ".error"); }
std::string mismatchFile(const std::string& dir, int rank) {
  return rankFile(dir, rank, ".mismatch");
}
std::string stderrFile(const std::string& dir, int rank) { return rankFile(dir, rank, ".stderr"); }

bool writeFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string readText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

bool writeWorkerError(const std::string& path, const WorkerError& error) {
  return writeFileAtomically(path, std::string(kKindTag) +
                                       fsdp_opt::runtime::errorKindName(error.kind) + "\n" +
                                       kMessageTag + error.message + "\n");
}

std::optional<WorkerError> readWorkerError(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  WorkerError error;
  std::string kind;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(kKindTag, 0) == 0) kind = line.substr(std::string(kKindTag).size());
    if (line.rfind(kMessageTag, 0) == 0)
      error.message = line.substr(std::string(kMessageTag).size());
  }
  if (!fsdp_opt::runtime::parseErrorKind(kind, &error.kind)) {
    error.kind = fsdp_opt::runtime::ErrorKind::kInternal;
  }
  return error;
}

}  // namespace fsdp_run
