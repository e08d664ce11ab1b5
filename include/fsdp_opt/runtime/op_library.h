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

/// An error from loading a model, followed by how to load the op library it lacks ("; the model
/// calls torchvision::nms, ... load that library with --load-op-library=PATH ...") when it is
/// TorchScript's "Unknown builtin op: NS::NAME" for a namespace no built-in library registers;
/// otherwise the error as it is. Both tools take the library as --load-op-library.
std::string withMissingOpLibraryHint(const std::string& loadError);

}  // namespace runtime
}  // namespace fsdp_opt
