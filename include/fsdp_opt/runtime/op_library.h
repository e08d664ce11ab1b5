// Libraries of custom TorchScript ops (torchvision's nms and roi_align, a user's C++ extension):
// a model that calls them loads only in a process where they are registered, which Python does
// when the package is imported and a C++ program does by loading the library. fsdp-opt and
// fsdp-run take them as --load-op-library (docs/runtime.md, "Models with custom ops").
// Torch-free, like fsdp_opt/runtime/runtime.h.
#pragma once

#include <string>

namespace fsdp_opt {
namespace runtime {

/// Loads a shared library whose static initialisers register TorchScript ops
/// (dlopen RTLD_NOW | RTLD_GLOBAL, what torch.ops.load_library does). Loading one path again
/// does nothing. Returns "" or one line naming the library and the loader's reason.
std::string loadOpLibrary(const std::string& path);

/// For an error from loading a model, a sentence telling how to load the op library it lacks,
/// when the error is TorchScript's "Unknown builtin op: NS::NAME" for a namespace no built-in
/// library registers (torchvision::nms: "... --load-op-library=torchvision's _C.so ...");
/// otherwise "". `flag` is how the caller's users pass a library ("--load-op-library").
std::string missingOpLibraryHint(const std::string& loadError, const std::string& flag);

}  // namespace runtime
}  // namespace fsdp_opt
