// The FSDP plan: which module instances are units, their forward methods, and their parameter
// groups (FSDP2's rule, SPEC sections 1-3). Computed once per pipeline from the module and the
// options; keyed by module paths, which stay valid when types are specialized.
#pragma once

#include <ATen/core/Tensor.h>
#include <fsdp_opt/format.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fsdp_opt {

// One attribute slot holding a parameter: owner module path + attribute name.
struct ParamSlot {
  std::string ownerPath;
  std::string name;
  std::string path() const;  // "blocks.0.fc.weight"
};

// One parameter tensor of a group. Tied parameters are ONE GroupParam with several slots.
struct GroupParam {
  std::vector<ParamSlot> slots;  // first = canonical (named_parameters order)
  at::Tensor tensor;             // the original, unsharded tensor
  std::vector<int64_t> shape;
  std::string path() const { return slots.front().path(); }
  int64_t rows() const { return shape.empty() ? 1 : shape.front(); }
  int64_t bytes() const;
};

struct Unit {
  std::string path;                         // "" is the root
  std::vector<std::string> forwardMethods;  // sorted; always holds "forward" when defined
  std::vector<GroupParam> params;           // 0-dim parameters are replicated, never listed
  bool hasForwardMethod(const std::string& method) const;
  int64_t bytes() const;
};

struct FsdpPlan {
  std::vector<Unit> units;                 // named_modules() order
  std::map<std::string, size_t> unitIndex;  // unit path -> index
  std::map<std::string, size_t> unitOfParamPath;  // every slot path of a group param -> unit

  const Unit* unitAt(const std::string& modulePath) const;
  // The unit whose group holds the parameter at this slot path, if any.
  const Unit* unitOfParam(const std::string& paramPath) const;
  // The nearest unit at or above a module path (the unit whose group its own parameters join).
  const Unit* enclosingUnit(const std::string& modulePath) const;
  // Bytes unsharded while `unit` runs with nothing gathered ahead: its own group plus every unit
  // nested in it (their gathers happen inside its calls). The scheduling passes' peak estimates
  // use it; computed for all units on the first call, in O(units x depth).
  int64_t footprintBytes(const Unit& unit) const;

 private:
  mutable std::vector<int64_t> footprints_;
};

// W ranks as W / S replicas of shard groups of S consecutive ranks (S = W: plain FSDP). Rank r
// holds shard r % S of every unit parameter.
struct Mesh {
  int64_t worldSize = 1;
  int64_t shardGroupSize = 1;
  int64_t replicas() const { return worldSize / shardGroupSize; }
  int64_t shardOf(int64_t rank) const { return rank % shardGroupSize; }
};


}  // namespace fsdp_opt
