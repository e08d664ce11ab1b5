#include "fsdp_opt/runtime/op_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <regex>

#include <c10/core/CPUAllocator.h>

namespace fsdp_opt {
namespace runtime {
namespace {

// The directory of the torch libraries this process runs with (where libc10 was loaded from).
std::string torchLibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string() : file.substr(0, slash);
}

// An op library links torch's libraries by name (libtorch.so, and libtorch_cuda.so and
// libc10_cuda.so for a CUDA wheel) and finds them in Python because `import torch` loaded them
// all first. A C++ program linked to part of the same torch has not, and the loader would look
// for the rest on its own search path: not found, or another torch's (a system libtorch.so
// beside a wheel's: two torches in one process, which crashes while registering ops). So the
// torch libraries of this process's directory are loaded first, as `import torch` does.
void loadTorchLibrariesOfThisProcess() {
  const std::string dir = torchLibraryDir();
  if (dir.empty()) return;
  for (const char* name : {"libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so"}) {
    const std::string file = dir + "/" + name;
    if (access(file.c_str(), R_OK) == 0) dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

}  // namespace

std::string loadOpLibrary(const std::string& path) {
  // The library stays loaded for the process's life: ops it registered may be called at any
  // time, and unloading them is not something TorchScript supports.
  loadTorchLibrariesOfThisProcess();
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return {};
  const char* why = dlerror();
  return "cannot load op library '" + path + "': " + (why != nullptr ? why : "unknown reason");
}

std::string withMissingOpLibraryHint(const std::string& loadError) {
  static const std::regex unknownOp("Unknown builtin op: ([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)");
  std::smatch match;
  if (!std::regex_search(loadError, match, unknownOp)) return loadError;
  const std::string ns = match[1];
  if (ns == "aten" || ns == "prim" || ns == "fsdp" || ns == "fsdp_opt") return loadError;
  std::string hinted = loadError + "; the model calls " + ns + "::" + std::string(match[2]) +
                       ", an op its own library registers: load that library with --load-op-library=PATH";
  if (ns == "torchvision") {
    hinted += " (torchvision's is the _C*.so beside the file `python -c 'import torchvision; print(torchvision.__file__)'` prints)";
  }
  return hinted;
}

}  // namespace runtime
}  // namespace fsdp_opt
