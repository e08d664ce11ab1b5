#include "fsdp_opt/runtime/compare.h"

#include <cstring>
#include <sstream>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/class_type.h>

#include "fsdp_opt/format.h"

namespace fsdp_opt {
namespace {

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

std::optional<std::string> diffAt(const std::string& path, const std::string& what) {
  return path + ": " + what;
}

std::optional<std::string> compareSequences(const std::vector<c10::IValue>& a,
                                            const std::vector<c10::IValue>& b,
                                            const std::string& path) {
  if (a.size() != b.size()) {
    return diffAt(path, std::to_string(a.size()) + " elements vs " + std::to_string(b.size()));
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
      return diffAt(path, std::string(a.tagKind()) + " vs " + b.tagKind());
    }
    if (auto d = compareTensors(a.toTensor(), b.toTensor())) return diffAt(path, *d);
    return std::nullopt;
  }
  if (std::string(a.tagKind()) != b.tagKind()) {
    return diffAt(path, std::string(a.tagKind()) + " vs " + b.tagKind());
  }
  if (a.isNone()) return std::nullopt;
  if (a.isInt()) {
    if (a.toInt() == b.toInt()) return std::nullopt;
    return diffAt(path, std::to_string(a.toInt()) + " vs " + std::to_string(b.toInt()));
  }
  if (a.isDouble()) {
    const double x = a.toDouble();
    const double y = b.toDouble();
    if (std::memcmp(&x, &y, sizeof(double)) == 0) return std::nullopt;
    std::ostringstream os;
    os.precision(17);
    os << x << " vs " << y << " (bitwise)";
    return diffAt(path, os.str());
  }
  if (a.isBool()) {
    if (a.toBool() == b.toBool()) return std::nullopt;
    return diffAt(path, std::string(a.toBool() ? "True" : "False") + " vs " +
                            (b.toBool() ? "True" : "False"));
  }
  if (a.isString()) {
    if (a.toStringRef() == b.toStringRef()) return std::nullopt;
    return diffAt(path, "'" + a.toStringRef() + "' vs '" + b.toStringRef() + "'");
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
      return diffAt(path,
                    std::to_string(da.size()) + " dict entries vs " + std::to_string(db.size()));
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
    return diffAt(path, a.toDevice().str() + " vs " + b.toDevice().str());
  }
  if (a.isObject()) {
    const auto oa = a.toObject();
    const auto ob = b.toObject();
    if (oa->type()->name() != ob->type()->name())
      return diffAt(path, "objects of different classes");
    return compareSequences(oa->slots(), ob->slots(), path + ".<attrs>");
  }
  return diffAt(path, std::string("cannot compare values of kind ") + a.tagKind());
}

}  // namespace

std::string dtypeName(c10::ScalarType t) {
  const char* name = dtypeNameOfScalarType(static_cast<int>(t));
  return name != nullptr ? name : c10::toString(t);
}

std::optional<std::string> bitwiseDifference(const c10::IValue& got, const c10::IValue& want,
                                             const std::string& path) {
  return compareValues(got, want, path);
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

}  // namespace fsdp_opt
