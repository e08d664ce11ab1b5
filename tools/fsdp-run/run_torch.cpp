#include "run_torch.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include "fsdp_opt/runtime/compare.h"
#include "fsdp_opt/runtime/op_library.h"
#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_run {
namespace {

// ---- files -----------------------------------------------------------------------------------

bool readFile(const std::string& path, std::vector<char>* out, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (f.bad()) {
    *err = "cannot read " + path;
    return false;
  }
  return true;
}

bool writeBytes(const std::string& path, const std::vector<char>& data) {
  return writeFileAtomically(path, std::string(data.begin(), data.end()));
}

// Writes `value` with torch::jit::pickle_save. Returns "" or "cannot write PATH" / "cannot
// serialize WHAT: WHY".
std::string savePickle(const std::string& path, const c10::IValue& value, const std::string& what) {
  try {
    if (!writeBytes(path, torch::jit::pickle_save(value))) return "cannot write " + path;
  } catch (const std::exception& e) {
    return "cannot serialize " + what + ": " + fsdp_opt::runtime::oneLineMessage(e);
  }
  return {};
}

// Loads a torch.save'd / pickle_save'd value.
c10::IValue loadPickle(const std::string& path) {
  std::vector<char> bytes;
  std::string err;
  if (!readFile(path, &bytes, &err)) throw std::runtime_error(err);
  return torch::jit::pickle_load(bytes);
}

std::vector<c10::IValue> argsFrom(const c10::IValue& v, const std::string& path) {
  if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    return std::vector<c10::IValue>(elems.begin(), elems.end());
  }
  if (v.isList()) {
    std::vector<c10::IValue> out;
    for (const c10::IValue& e : v.toList()) out.push_back(e);
    return out;
  }
  throw std::runtime_error(path + " holds a " + v.tagKind() +
                           ", not a tuple or list of positional arguments");
}

// `value` with its containers typed as `type` says, where its elements fit. torch.save writes a
// Python list, dict or tuple without element types, and pickle_load reads it back as List[Any]
// (Dict[Any, Any]), which a method taking List[Tensor] refuses; calling from Python converts it
// by the method's schema, and so does this. What does not fit is left as it is, for the schema
// check to name.
c10::IValue typedAs(const c10::IValue& value, const c10::TypePtr& type) {
  if (auto optional = type->cast<c10::OptionalType>()) {
    return value.isNone() ? value : typedAs(value, optional->getElementType());
  }
  if (auto list = type->cast<c10::ListType>(); list && value.isList()) {
    const c10::TypePtr element = list->getElementType();
    c10::impl::GenericList typed(element);
    for (const c10::IValue& item : value.toListRef()) {
      c10::IValue fitted = typedAs(item, element);
      if (!fitted.type()->isSubtypeOf(*element)) return value;
      typed.push_back(std::move(fitted));
    }
    return typed;
  }
  if (auto dict = type->cast<c10::DictType>(); dict && value.isGenericDict()) {
    c10::impl::GenericDict typed(dict->getKeyType(), dict->getValueType());
    for (const auto& entry : value.toGenericDict()) {
      c10::IValue key = typedAs(entry.key(), dict->getKeyType());
      c10::IValue item = typedAs(entry.value(), dict->getValueType());
      if (!key.type()->isSubtypeOf(*dict->getKeyType()) || !item.type()->isSubtypeOf(*dict->getValueType())) return value;
      typed.insert(std::move(key), std::move(item));
    }
    return typed;
  }
  if (auto tuple = type->cast<c10::TupleType>(); tuple && value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    if (items.size() != tuple->elements().size()) return value;
    std::vector<c10::IValue> typed;
    for (size_t i = 0; i < items.size(); ++i) typed.push_back(typedAs(items[i], tuple->elements()[i]));
    return c10::ivalue::Tuple::create(std::move(typed));
  }
  return value;
}

// The positional arguments typed by the method's schema (its first argument is `self`).
std::vector<c10::IValue> typedBySchema(std::vector<c10::IValue> args, const c10::FunctionSchema& schema) {
  for (size_t i = 0; i < args.size() && i + 1 < schema.arguments().size(); ++i) {
    args[i] = typedAs(args[i], schema.arguments()[i + 1].type());
  }
  return args;
}

// "cannot load PATH: WHY", with how to load the op library it lacks when that is why.
std::string cannotLoad(const std::string& path, const std::exception& e) {
  return "cannot load " + path + ": " + fsdp_opt::runtime::withMissingOpLibraryHint(fsdp_opt::runtime::oneLineMessage(e));
}

std::vector<c10::IValue> deepcopy(const std::vector<c10::IValue>& args) {
  // Copied as one tuple, so aliasing between arguments (the same tensor twice) is kept.
  const c10::IValue copy = c10::IValue(c10::ivalue::Tuple::create(args)).deepcopy();
  const auto& elems = copy.toTupleRef().elements();
  return std::vector<c10::IValue>(elems.begin(), elems.end());
}

}  // namespace

// ---- worker ------------------------------------------------------------------------------------

int workerMain(const WorkerArgs& args) {
  using fsdp_opt::runtime::ErrorKind;
  auto fail = [&](int code, ErrorKind kind, const std::string& msg) {
    writeWorkerError(errorFile(args.outDir, args.rank), WorkerError{kind, fsdp_opt::runtime::oneLineMessage(msg)});
    return code;
  };

  for (const std::string& library : args.opLibraries) {
    if (std::string err = fsdp_opt::runtime::loadOpLibrary(library); !err.empty()) {
      return fail(kWorkerBadInput, ErrorKind::kBadInput, err);
    }
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(args.modelPath);
  } catch (const std::exception& e) {
    return fail(kWorkerBadInput, ErrorKind::kBadInput, cannotLoad(args.modelPath, e));
  }
  auto method = module.find_method(args.method);
  if (!method) {
    return fail(kWorkerBadInput, ErrorKind::kBadInput,
                args.modelPath + " has no method '" + args.method + "'");
  }
  std::vector<c10::IValue> inputs;
  if (!args.inputsPath.empty()) {
    try {
      inputs = argsFrom(loadPickle(args.inputsPath), args.inputsPath);
    } catch (const std::exception& e) {
      return fail(kWorkerBadInput, ErrorKind::kBadInput,
                  "cannot read inputs " + args.inputsPath + ": " + fsdp_opt::runtime::oneLineMessage(e));
    }
  }

  inputs = typedBySchema(std::move(inputs), method->function().getSchema());
  // Arguments that do not fit the method's schema are bad input, not a failed run.
  try {
    std::vector<c10::IValue> probe = inputs;
    probe.insert(probe.begin(), module._ivalue());
    method->function().getSchema().checkAndNormalizeInputs(probe);
  } catch (const std::exception& e) {
    return fail(kWorkerBadInput, ErrorKind::kBadInput,
                "inputs " + (args.inputsPath.empty() ? std::string("(none)") : args.inputsPath) +
                    " do not fit " + args.method + "(): " + fsdp_opt::runtime::oneLineMessage(e));
  }

  fsdp_opt::runtime::resetStats();
  c10::IValue first;
  std::string mismatch;
  std::optional<torch::NoGradGuard> noGrad;
  if (args.noGrad) noGrad.emplace();
  for (int rep = 0; rep < args.repeat; ++rep) {
    c10::IValue out;
    try {
      out = (*method)(deepcopy(inputs));
    } catch (const std::exception& e) {
      std::string msg = fsdp_opt::runtime::oneLineMessage(e);
      if (args.repeat > 1) msg = "run " + std::to_string(rep + 1) + " of " +
                                 std::to_string(args.repeat) + ": " + msg;
      // TorchScript cannot catch, so the last fsdp:: op either raised this or succeeded.
      const ErrorKind kind = fsdp_opt::runtime::lastOpError().kind;
      return fail(kWorkerFailed, kind == ErrorKind::kNone ? ErrorKind::kModel : kind, msg);
    }
    if (rep == 0) {
      first = out;
      continue;
    }
    // Only runs that differ from the first are kept: a model without state across calls, the
    // usual case, writes one output file however many runs it makes.
    const bool keep = args.runsCheckedAgainstOriginal;
    if (!keep && !mismatch.empty()) continue;
    const std::optional<std::string> d = fsdp_opt::bitwiseDifference(out, first);
    if (!d) continue;
    if (!keep) {
      mismatch = "run " + std::to_string(rep + 1) + " differs from run 1: " + *d +
                 " (without --check every run must equal the first; with --check each run is "
                 "compared with the original's run of the same number)";
      continue;
    }
    const std::string err = savePickle(runOutputFile(args.outDir, args.rank, rep + 1), out,
                                       "run " + std::to_string(rep + 1) + "'s outputs");
    if (!err.empty()) return fail(kWorkerFailed, ErrorKind::kInternal, err);
  }

  if (std::string err = savePickle(outputFile(args.outDir, args.rank), first, "the outputs"); !err.empty()) {
    return fail(kWorkerFailed, ErrorKind::kInternal, err);
  }
  std::ostringstream stats;
  for (const auto& kv : fsdp_opt::runtime::stats().items()) {
    stats << kv.first << " " << kv.second << "\n";
  }
  writeFileAtomically(statsFile(args.outDir, args.rank), stats.str());
  if (!mismatch.empty()) {
    writeFileAtomically(mismatchFile(args.outDir, args.rank), mismatch + "\n");
    return kWorkerRepeatMismatch;
  }
  return kWorkerOk;
}

// ---- checker -----------------------------------------------------------------------------------

struct Checker::Impl {
  std::vector<c10::IValue> inputs;
  int repeat = 1;
  c10::IValue reference;                     // the original's first run
  std::map<int, c10::IValue> laterReference;  // its later runs that differ from the first
};

Checker::Checker() : impl_(std::make_unique<Impl>()) {}
Checker::~Checker() = default;

std::string Checker::loadInputs(const std::string& path) {
  try {
    impl_->inputs = argsFrom(loadPickle(path), path);
  } catch (const std::exception& e) {
    return "cannot read inputs " + path + ": " + fsdp_opt::runtime::oneLineMessage(e);
  }
  return {};
}

std::string Checker::runOriginal(const std::string& path, const std::string& method,
                                 int repeat, bool noGrad) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    return cannotLoad(path, e);
  }
  auto m = module.find_method(method);
  if (!m) return path + " has no method '" + method + "'";
  impl_->repeat = repeat;
  std::optional<torch::NoGradGuard> noGradGuard;
  if (noGrad) noGradGuard.emplace();
  impl_->inputs = typedBySchema(std::move(impl_->inputs), m->function().getSchema());
  for (int run = 1; run <= repeat; ++run) {
    c10::IValue out;
    try {
      out = (*m)(deepcopy(impl_->inputs));
    } catch (const std::exception& e) {
      return "running " + path + " failed" +
             (repeat > 1 ? " in run " + std::to_string(run) : std::string()) + ": " +
             fsdp_opt::runtime::oneLineMessage(e);
    }
    if (run == 1) {
      impl_->reference = out;
    } else if (fsdp_opt::bitwiseDifference(out, impl_->reference)) {
      impl_->laterReference.emplace(run, out);
    }
  }
  return {};
}

std::string Checker::saveOriginal(const std::string& path) const {
  return savePickle(path, impl_->reference, "the original's outputs");
}

std::string Checker::compare(const std::string& dir, int rank, std::string* diff) const {
  diff->clear();
  auto load = [](const std::string& path, c10::IValue* value) -> std::string {
    try {
      *value = loadPickle(path);
    } catch (const std::exception& e) {
      return "cannot read " + path + ": " + fsdp_opt::runtime::oneLineMessage(e);
    }
    return {};
  };
  auto runLabel = [&](int run) {
    return impl_->repeat > 1
               ? "run " + std::to_string(run) + " of " + std::to_string(impl_->repeat) + ": "
               : std::string();
  };
  c10::IValue first;
  if (std::string err = load(outputFile(dir, rank), &first); !err.empty()) return err;
  if (auto d = fsdp_opt::bitwiseDifference(first, impl_->reference)) {
    *diff = runLabel(1) + *d;
    return {};
  }
  for (int run = 2; run <= impl_->repeat; ++run) {
    // A run with no file of its own and no reference of its own equals the first run on both
    // sides, which matched above.
    const std::string own = runOutputFile(dir, rank, run);
    const bool rankChanged = ::access(own.c_str(), F_OK) == 0;
    const auto reference = impl_->laterReference.find(run);
    const bool originalChanged = reference != impl_->laterReference.end();
    if (!rankChanged && !originalChanged) continue;
    c10::IValue got = first;
    if (rankChanged) {
      if (std::string err = load(own, &got); !err.empty()) return err;
    }
    const c10::IValue& want = originalChanged ? reference->second : impl_->reference;
    if (auto d = fsdp_opt::bitwiseDifference(got, want)) {
      *diff = runLabel(run) + *d;
      return {};
    }
  }
  return {};
}

std::string Checker::summarize(const std::string& file) {
  try {
    return fsdp_opt::summarizeValue(loadPickle(file));
  } catch (const std::exception& e) {
    return "<unreadable: " + fsdp_opt::runtime::oneLineMessage(e) + ">";
  }
}

}  // namespace fsdp_run
