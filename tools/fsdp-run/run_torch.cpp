#include "run_torch.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include "fsdp_opt/runtime.h"

namespace fsdp_run {
namespace {

// ---- messages --------------------------------------------------------------------------------

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reduces an exception text to one line. TorchScript wraps an op's error in a traceback that
// ends with "RuntimeError: <message>"; c10::Error texts may carry a C++ backtrace.
std::string oneLine(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  // The last "SomethingError: message" line of a TorchScript traceback carries the cause.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::string l = trim(*it);
    const auto colon = l.find(": ");
    if (colon == std::string::npos || colon == 0) continue;
    const std::string head = l.substr(0, colon);
    if (head.find(' ') == std::string::npos &&
        (endsWith(head, "Error") || endsWith(head, "Exception"))) {
      return trim(l.substr(colon + 2));
    }
  }
  for (const std::string& l : lines) {
    const std::string t = trim(l);
    if (!t.empty() && t.rfind("Exception raised from", 0) != 0) return t;
  }
  return "unknown error";
}

std::string describe(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    return oneLine(ce->what_without_backtrace());
  }
  return oneLine(e.what());
}

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

bool writeFile(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool writeBytes(const std::string& path, const std::vector<char>& data) {
  return writeFile(path, std::string(data.begin(), data.end()));
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

std::vector<c10::IValue> deepcopy(const std::vector<c10::IValue>& args) {
  // Copied as one tuple, so aliasing between arguments (the same tensor twice) is kept.
  const c10::IValue copy = c10::IValue(c10::ivalue::Tuple::create(args)).deepcopy();
  const auto& elems = copy.toTupleRef().elements();
  return std::vector<c10::IValue>(elems.begin(), elems.end());
}

// ---- bitwise comparison ------------------------------------------------------------------------

// Python's spelling of a dtype (float32, int64, ...).
std::string dtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(t);
  }
}

std::string shapeOf(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

std::optional<std::string> compareTensors(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) {
    return std::string(a.defined() ? "defined" : "undefined") + " tensor vs " +
           (b.defined() ? "defined" : "undefined");
  }
  if (!a.defined()) return std::nullopt;
  if (a.scalar_type() != b.scalar_type()) {
    return "dtype " + dtypeName(a.scalar_type()) + " vs " + dtypeName(b.scalar_type());
  }
  if (a.sizes() != b.sizes()) return "shape " + shapeOf(a) + " vs " + shapeOf(b);
  if (a.layout() != at::kStrided || b.layout() != at::kStrided) {
    return std::string("cannot compare non-strided tensors");
  }
  const at::Tensor ca = a.detach().cpu().contiguous();
  const at::Tensor cb = b.detach().cpu().contiguous();
  const size_t bytes = static_cast<size_t>(ca.numel()) * ca.element_size();
  if (bytes == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), bytes) == 0) return std::nullopt;
  const size_t es = ca.element_size();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  int64_t differing = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < ca.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  }
  std::ostringstream os;
  os << differing << " of " << ca.numel() << " elements differ bitwise (first at flat index "
     << first << ")";
  return os.str();
}

std::optional<std::string> compareValues(const c10::IValue& a, const c10::IValue& b,
                                         const std::string& path);

std::optional<std::string> at(const std::string& path, const std::string& what) {
  return path + ": " + what;
}

std::optional<std::string> compareSequences(const std::vector<c10::IValue>& a,
                                            const std::vector<c10::IValue>& b,
                                            const std::string& path) {
  if (a.size() != b.size()) {
    return at(path, std::to_string(a.size()) + " elements vs " + std::to_string(b.size()));
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (auto d = compareValues(a[i], b[i], path + "[" + std::to_string(i) + "]")) return d;
  }
  return std::nullopt;
}

std::vector<c10::IValue> listElems(const c10::IValue& v) {
  std::vector<c10::IValue> out;
  for (const c10::IValue& e : v.toList()) out.push_back(e);
  return out;
}

std::optional<std::string> compareValues(const c10::IValue& a, const c10::IValue& b,
                                         const std::string& path) {
  if (a.isTensor() || b.isTensor()) {
    if (!(a.isTensor() && b.isTensor())) {
      return at(path, std::string(a.tagKind()) + " vs " + b.tagKind());
    }
    if (auto d = compareTensors(a.toTensor(), b.toTensor())) return at(path, *d);
    return std::nullopt;
  }
  if (std::string(a.tagKind()) != b.tagKind()) {
    return at(path, std::string(a.tagKind()) + " vs " + b.tagKind());
  }
  if (a.isNone()) return std::nullopt;
  if (a.isInt()) {
    if (a.toInt() == b.toInt()) return std::nullopt;
    return at(path, std::to_string(a.toInt()) + " vs " + std::to_string(b.toInt()));
  }
  if (a.isDouble()) {
    const double x = a.toDouble();
    const double y = b.toDouble();
    if (std::memcmp(&x, &y, sizeof(double)) == 0) return std::nullopt;
    std::ostringstream os;
    os.precision(17);
    os << x << " vs " << y << " (bitwise)";
    return at(path, os.str());
  }
  if (a.isBool()) {
    if (a.toBool() == b.toBool()) return std::nullopt;
    return at(path, std::string(a.toBool() ? "True" : "False") + " vs " +
                        (b.toBool() ? "True" : "False"));
  }
  if (a.isString()) {
    if (a.toStringRef() == b.toStringRef()) return std::nullopt;
    return at(path, "'" + a.toStringRef() + "' vs '" + b.toStringRef() + "'");
  }
  if (a.isTuple()) {
    const auto& ea = a.toTupleRef().elements();
    const auto& eb = b.toTupleRef().elements();
    return compareSequences(std::vector<c10::IValue>(ea.begin(), ea.end()),
                            std::vector<c10::IValue>(eb.begin(), eb.end()), path);
  }
  if (a.isList()) return compareSequences(listElems(a), listElems(b), path);
  if (a.isGenericDict()) {
    const auto da = a.toGenericDict();
    const auto db = b.toGenericDict();
    if (da.size() != db.size()) {
      return at(path, std::to_string(da.size()) + " dict entries vs " + std::to_string(db.size()));
    }
    auto ia = da.begin();
    auto ib = db.begin();
    for (size_t i = 0; ia != da.end(); ++ia, ++ib, ++i) {
      const std::string p = path + "{" + std::to_string(i) + "}";
      if (auto d = compareValues(ia->key(), ib->key(), p + ".key")) return d;
      if (auto d = compareValues(ia->value(), ib->value(), p + ".value")) return d;
    }
    return std::nullopt;
  }
  if (a.isDevice()) {
    if (a.toDevice() == b.toDevice()) return std::nullopt;
    return at(path, a.toDevice().str() + " vs " + b.toDevice().str());
  }
  if (a.isObject()) {
    const auto oa = a.toObject();
    const auto ob = b.toObject();
    if (oa->type()->name() != ob->type()->name()) return at(path, "objects of different classes");
    return compareSequences(oa->slots(), ob->slots(), path + ".<attrs>");
  }
  return at(path, std::string("cannot compare values of kind ") + a.tagKind());
}

std::string summarizeValue(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return "Tensor(undefined)";
    return "Tensor " + dtypeName(t.scalar_type()) + shapeOf(t);
  }
  auto seq = [](const std::vector<c10::IValue>& xs, const char* open, const char* close) {
    std::string s = open;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (i) s += ", ";
      if (i == 8) {
        s += "... (" + std::to_string(xs.size()) + " elements)";
        break;
      }
      s += summarizeValue(xs[i]);
    }
    return s + close;
  };
  if (v.isTuple()) {
    const auto& e = v.toTupleRef().elements();
    return seq(std::vector<c10::IValue>(e.begin(), e.end()), "(", ")");
  }
  if (v.isList()) return seq(listElems(v), "[", "]");
  if (v.isGenericDict()) return "Dict(" + std::to_string(v.toGenericDict().size()) + " entries)";
  if (v.isInt() || v.isDouble() || v.isBool() || v.isNone() || v.isString()) {
    std::ostringstream os;
    os << v;
    return os.str();
  }
  return v.tagKind();
}

}  // namespace

// ---- worker ------------------------------------------------------------------------------------

std::string outputFile(const std::string& d, int r) { return d + "/rank" + std::to_string(r) + ".out.pt"; }
std::string statsFile(const std::string& d, int r) { return d + "/rank" + std::to_string(r) + ".stats"; }
std::string errorFile(const std::string& d, int r) { return d + "/rank" + std::to_string(r) + ".error"; }
std::string mismatchFile(const std::string& d, int r) {
  return d + "/rank" + std::to_string(r) + ".mismatch";
}

int workerMain(const WorkerArgs& args) {
  auto fail = [&](int code, const std::string& msg) {
    writeFile(errorFile(args.outDir, args.rank), oneLine(msg) + "\n");
    return code;
  };

  torch::jit::Module module;
  try {
    module = torch::jit::load(args.modelPath);
  } catch (const std::exception& e) {
    return fail(kWorkerBadInput, "cannot load " + args.modelPath + ": " + describe(e));
  }
  auto method = module.find_method(args.method);
  if (!method) {
    return fail(kWorkerBadInput, args.modelPath + " has no method '" + args.method + "'");
  }
  std::vector<c10::IValue> inputs;
  if (!args.inputsPath.empty()) {
    try {
      inputs = argsFrom(loadPickle(args.inputsPath), args.inputsPath);
    } catch (const std::exception& e) {
      return fail(kWorkerBadInput, "cannot read inputs " + args.inputsPath + ": " + describe(e));
    }
  }

  // Arguments that do not fit the method's schema are bad input, not a failed run.
  try {
    std::vector<c10::IValue> probe = inputs;
    probe.insert(probe.begin(), module._ivalue());
    method->function().getSchema().checkAndNormalizeInputs(probe);
  } catch (const std::exception& e) {
    return fail(kWorkerBadInput, "inputs " + (args.inputsPath.empty() ? std::string("(none)")
                                                                      : args.inputsPath) +
                                     " do not fit " + args.method + "(): " + describe(e));
  }

  fsdp_opt::runtime::resetStats();
  c10::IValue first;
  std::string mismatch;
  for (int rep = 0; rep < args.repeat; ++rep) {
    c10::IValue out;
    try {
      out = (*method)(deepcopy(inputs));
    } catch (const std::exception& e) {
      std::string msg = describe(e);
      if (args.repeat > 1) msg = "run " + std::to_string(rep + 1) + " of " +
                                 std::to_string(args.repeat) + ": " + msg;
      return fail(kWorkerFailed, msg);
    }
    if (rep == 0) {
      first = out;
    } else if (mismatch.empty()) {
      if (auto d = compareValues(out, first, "output")) {
        mismatch = "run " + std::to_string(rep + 1) + " differs from run 1: " + *d;
      }
    }
  }

  try {
    if (!writeBytes(outputFile(args.outDir, args.rank), torch::jit::pickle_save(first))) {
      return fail(kWorkerFailed, "cannot write " + outputFile(args.outDir, args.rank));
    }
  } catch (const std::exception& e) {
    return fail(kWorkerFailed, "cannot serialize the outputs: " + describe(e));
  }
  std::ostringstream stats;
  for (const auto& kv : fsdp_opt::runtime::stats().items()) {
    stats << kv.first << " " << kv.second << "\n";
  }
  writeFile(statsFile(args.outDir, args.rank), stats.str());
  if (!mismatch.empty()) {
    writeFile(mismatchFile(args.outDir, args.rank), mismatch + "\n");
    return kWorkerRepeatMismatch;
  }
  return kWorkerOk;
}

// ---- checker -----------------------------------------------------------------------------------

struct Checker::Impl {
  std::vector<c10::IValue> inputs;
  c10::IValue reference;
};

Checker::Checker() : impl_(std::make_unique<Impl>()) {}
Checker::~Checker() = default;

std::string Checker::loadInputs(const std::string& path) {
  try {
    impl_->inputs = argsFrom(loadPickle(path), path);
  } catch (const std::exception& e) {
    return "cannot read inputs " + path + ": " + describe(e);
  }
  return {};
}

std::string Checker::runOriginal(const std::string& path, const std::string& method) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    return "cannot load " + path + ": " + describe(e);
  }
  auto m = module.find_method(method);
  if (!m) return path + " has no method '" + method + "'";
  try {
    impl_->reference = (*m)(deepcopy(impl_->inputs));
  } catch (const std::exception& e) {
    return "running " + path + " failed: " + describe(e);
  }
  return {};
}

std::string Checker::saveOriginal(const std::string& path) const {
  try {
    if (!writeBytes(path, torch::jit::pickle_save(impl_->reference))) return "cannot write " + path;
  } catch (const std::exception& e) {
    return "cannot serialize the original's outputs: " + describe(e);
  }
  return {};
}

std::string Checker::compare(const std::string& rankOutputFile, std::string* diff) const {
  c10::IValue got;
  try {
    got = loadPickle(rankOutputFile);
  } catch (const std::exception& e) {
    return "cannot read " + rankOutputFile + ": " + describe(e);
  }
  auto d = compareValues(got, impl_->reference, "output");
  *diff = d ? *d : std::string();
  return {};
}

std::string Checker::summarize(const std::string& file) {
  try {
    return summarizeValue(loadPickle(file));
  } catch (const std::exception& e) {
    return "<unreadable: " + describe(e) + ">";
  }
}

}  // namespace fsdp_run
