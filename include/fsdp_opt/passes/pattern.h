// Module-path patterns of SPEC section 3: `*` matches within one dotted component, `**` matches any
// number of components (zero included), and `.` alone names the root module (path "").
#pragma once

#include <string>

namespace fsdp_opt {

bool matchModulePattern(const std::string& pattern, const std::string& modulePath);

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string joinPath(const std::string& parent, const std::string& name);

// How a module path is shown to users: the root is ".".
std::string displayPath(const std::string& modulePath);

}  // namespace fsdp_opt
