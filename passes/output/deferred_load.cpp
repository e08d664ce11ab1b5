// Loads a TorchScript archive leaving the records that hold only parameters unread.
// See include/fsdp_opt/passes/deferred_load.h.
//
// How: PyTorchStreamReader copies a stored record with one read of the whole record into the
// buffer it has just allocated. A read adapter that recognises a tensor record's data offset
// skips that read and notes which buffer it left unfilled; a large buffer comes fresh from the
// allocator (mmap), so its pages are never touched and never resident.
//
// Assumes: loading builds the object tree and looks at no tensor's values. That holds for the
// pickled attributes of scripted modules, but not for a class with __setstate__ (TorchScript or
// a torchbind class such as quantized packed weights), which computes from its tensors while
// loading: a module holding one is loaded whole. So is one where an unfilled buffer is not
// reachable from the module (something kept a tensor the walk cannot see).
//
// Guarantees: after loadDeferringParameters, every reachable tensor except those whose storage
// is held only by parameter slots has its bytes, and ParameterBytes knows the file offset of
// every storage that does not.
#include <fsdp_opt/passes/deferred_load.h>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_set>

namespace fsdp_opt {
namespace {

// Smaller records are read at load: deferring them saves nothing worth a later read each.
constexpr size_t kMinDeferredBytes = 64 * 1024;

void readFully(int fd, uint64_t offset, void* into, size_t bytes, const std::string& path) {
  char* out = static_cast<char*>(into);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, out, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw std::runtime_error("cannot read '" + path + "' at byte " + std::to_string(offset) + ": " +
                               (got < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

class DeferringReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  DeferringReadAdapter(int fd, std::string path, size_t size, std::unordered_set<uint64_t> tensorRecords)
      : fd_(fd), path_(std::move(path)), size_(size), tensorRecords_(std::move(tensorRecords)) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (n >= kMinDeferredBytes && tensorRecords_.count(pos)) {
      unfilled_[buf] = {pos, n};
      return n;
    }
    readFully(fd_, pos, buf, n, path_);
    return n;
  }
  struct Unfilled {
    uint64_t offset;
    size_t bytes;
  };
  const std::unordered_map<const void*, Unfilled>& unfilled() const { return unfilled_; }

 private:
  int fd_;
  std::string path_;
  size_t size_;
  std::unordered_set<uint64_t> tensorRecords_;
  mutable std::unordered_map<const void*, Unfilled> unfilled_;
};

// Data offsets of the archive's tensor records ("data/<key>"; constants live in constants.pkl
// and its own records, which are read as usual).
std::unordered_set<uint64_t> tensorRecordOffsets(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::unordered_set<uint64_t> offsets;
  for (const std::string& name : reader.getAllRecords()) {
    if (name.rfind("data/", 0) == 0) offsets.insert(reader.getRecordOffset(name));
  }
  return offsets;
}

struct StorageUse {
  c10::Storage storage;
  std::unordered_set<const c10::TensorImpl*> tensors;
  bool onlyParameterSlots = true;
};

// Visits every tensor and object reachable from `root` (each object once).
void walkReachable(const c10::IValue& root,
                   const std::function<void(const at::Tensor&, bool isParameterSlot)>& onTensor,
                   const std::function<void(const c10::IValue&)>& onOpaque) {
  std::unordered_set<const void*> seen;
  std::vector<std::pair<c10::IValue, bool>> pending{{root, false}};
  while (!pending.empty()) {
    auto [value, isParameter] = std::move(pending.back());
    pending.pop_back();
    if (value.isTensor()) {
      onTensor(value.toTensor(), isParameter);
    } else if (value.isObject()) {
      auto object = value.toObject();
      if (!seen.insert(object.get()).second) continue;
      const auto& type = object->type();
      if (onOpaque && type->findMethod("__setstate__")) onOpaque(value);
      for (size_t i = 0; i < object->slots().size(); ++i) {
        bool parameterSlot = type->is_module() && i < type->numAttributes() && type->is_parameter(i);
        pending.emplace_back(object->getSlot(i), parameterSlot);
      }
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) pending.emplace_back(element, false);
    } else if (value.isTuple()) {
      for (const c10::IValue& element : value.toTupleRef().elements()) pending.emplace_back(element, false);
    } else if (value.isGenericDict()) {
      for (const auto& entry : value.toGenericDict()) {
        pending.emplace_back(entry.key(), false);
        pending.emplace_back(entry.value(), false);
      }
    } else if (value.isCapsule() && onOpaque) {
      onOpaque(value);
    }
  }
}

}  // namespace

void forEachReachableTensor(const c10::IValue& root,
                            const std::function<void(const at::Tensor&, bool isParameterSlot)>& visit) {
  walkReachable(root, visit, {});
}

// The whole archive mapped read-only, shared by the in-place rows cut from it.
struct ParameterBytes::Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

ParameterBytes::ParameterBytes(std::string path, int fd, size_t fileSize,
                               std::unordered_map<const void*, Record> deferred)
    : path_(std::move(path)), fd_(fd), mapping_(std::make_shared<Mapping>()), deferred_(std::move(deferred)) {
  if (!deferred_.empty() && fileSize > 0) {
    mapping_->size = fileSize;
    mapping_->base = ::mmap(nullptr, fileSize, PROT_READ, MAP_PRIVATE, fd_, 0);
  }
}

ParameterBytes::~ParameterBytes() { ::close(fd_); }

const ParameterBytes::Record* ParameterBytes::recordOf(const at::Tensor& tensor) const {
  if (!tensor.defined() || !tensor.has_storage()) return nullptr;
  auto found = deferred_.find(tensor.storage().data_ptr().get());
  return found == deferred_.end() ? nullptr : &found->second;
}

void ParameterBytes::readAt(uint64_t offset, void* into, size_t bytes) const {
  readFully(fd_, offset, into, bytes, path_);
}

ParameterBytes::Span ParameterBytes::spanOf(const Record& record, const at::Tensor& rows) const {
  // TorchScript parameters have no negative strides.
  Span span{rows.storage_offset(), rows.storage_offset(), 0};
  for (int64_t d = 0; d < rows.dim(); ++d) span.last += (rows.size(d) - 1) * rows.stride(d);
  const size_t element = rows.element_size();
  if ((static_cast<size_t>(span.last) + 1) * element > record.storage.nbytes()) {
    throw std::runtime_error("parameter rows past the end of their record in '" + path_ + "'");
  }
  span.fileOffset = record.fileOffset + static_cast<uint64_t>(span.first) * element;
  return span;
}

at::Tensor ParameterBytes::rowsInPlace(const at::Tensor& tensor, int64_t begin, int64_t count) const {
  const Record* record = recordOf(tensor);
  if (!record || mapping_->base == MAP_FAILED) return {};
  at::Tensor rows = tensor.narrow(0, begin, count);
  if (rows.numel() == 0 || !rows.is_non_overlapping_and_dense()) return {};
  const Span span = spanOf(*record, rows);
  if (span.fileOffset + rows.nbytes() > mapping_->size) return {};
  char* data = static_cast<char*>(mapping_->base) + span.fileOffset;
  std::shared_ptr<Mapping> keepMapped = mapping_;
  return at::from_blob(
      data, rows.sizes(), rows.strides(), [keepMapped](void*) {}, tensor.options().requires_grad(false));
}

void ParameterBytes::releasePages() const {
  if (mapping_->base != MAP_FAILED) ::madvise(mapping_->base, mapping_->size, MADV_DONTNEED);
}

void ParameterBytes::releasePagesOf(const void* data, size_t size) const {
  if (mapping_->base == MAP_FAILED || size == 0) return;
  const auto base = reinterpret_cast<uintptr_t>(mapping_->base);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (begin < base || begin + size > base + mapping_->size) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = begin & ~(page - 1);
  const uintptr_t last = (begin + size + page - 1) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void ParameterBytes::copyRows(const at::Tensor& tensor, int64_t begin, int64_t count, at::Tensor& out) const {
  at::Tensor rows = tensor.narrow(0, begin, count);
  const Record* record = recordOf(tensor);
  if (!record || rows.numel() == 0) {
    out.copy_(rows);
    return;
  }
  TORCH_INTERNAL_ASSERT(out.sizes() == rows.sizes() && out.dtype() == rows.dtype());
  const Span span = spanOf(*record, rows);
  // Rows laid out in memory as `out` is (both contiguous, or a channels_last shard of a
  // channels_last parameter) are one run of bytes, read straight into it.
  const bool sameLayout = rows.is_contiguous() ? out.is_contiguous()
                                               : rows.is_non_overlapping_and_dense() && rows.strides().equals(out.strides());
  if (sameLayout) {
    readAt(span.fileOffset, out.data_ptr(), out.nbytes());
    return;
  }
  at::Tensor bytes = at::empty({span.last - span.first + 1}, tensor.options().requires_grad(false));
  readAt(span.fileOffset, bytes.data_ptr(), bytes.nbytes());
  out.copy_(bytes.as_strided(rows.sizes(), rows.strides(), 0));
}

void ParameterBytes::materialize(const at::Tensor& tensor) {
  const Record* record = recordOf(tensor);
  if (!record) return;
  readAt(record->fileOffset, record->storage.data_ptr().get(), record->storage.nbytes());
  deferred_.erase(record->storage.data_ptr().get());
}

int64_t ParameterBytes::deferredBytes() const {
  int64_t total = 0;
  for (const auto& [pointer, record] : deferred_) total += static_cast<int64_t>(record.storage.nbytes());
  return total;
}

DeferredLoad loadDeferringParameters(const std::string& path) {
  std::unordered_set<uint64_t> records;
  try {
    records = tensorRecordOffsets(path);
  } catch (const std::exception&) {
    // Not a zip archive: torch::jit::load says why, or loads another format.
    return {torch::jit::load(path), nullptr, "it is not a zip archive of tensor records"};
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    if (fd >= 0) ::close(fd);
    return {torch::jit::load(path), nullptr, "it cannot be opened twice"};
  }
  auto adapter = std::make_shared<DeferringReadAdapter>(fd, path, static_cast<size_t>(info.st_size), std::move(records));
  torch::jit::Module module;
  try {
    module = torch::jit::load(adapter);
  } catch (...) {
    ::close(fd);
    throw;
  }

  // Which unfilled storages only parameter slots hold; every other one is read now.
  const auto& unfilled = adapter->unfilled();
  std::unordered_map<const c10::StorageImpl*, StorageUse> uses;
  std::string computedWhileLoading;
  walkReachable(
      module._ivalue(),
      [&](const at::Tensor& tensor, bool isParameter) {
        if (!tensor.defined() || !tensor.has_storage()) return;
        const c10::Storage& storage = tensor.storage();
        auto found = unfilled.find(storage.data_ptr().get());
        if (found == unfilled.end() || found->second.bytes != storage.nbytes()) return;
        StorageUse& use = uses[storage.unsafeGetStorageImpl()];
        if (!use.storage) use.storage = storage;
        use.tensors.insert(tensor.unsafeGetTensorImpl());
        use.onlyParameterSlots = use.onlyParameterSlots && isParameter;
      },
      [&](const c10::IValue& value) {
        if (!computedWhileLoading.empty()) return;
        const auto& type = value.isObject() ? value.toObject()->type() : nullptr;
        computedWhileLoading = type && type->name() ? "class '" + type->name()->qualifiedName() + "' has __setstate__"
                                                    : "it holds a torchbind object";
      });
  if (computedWhileLoading.empty() && uses.size() != unfilled.size()) {
    computedWhileLoading = "a tensor record is held outside the module's attributes";
  }
  if (!computedWhileLoading.empty()) {
    uses.clear();
    module = torch::jit::Module();
    adapter.reset();
    ::close(fd);
    return {torch::jit::load(path), nullptr, computedWhileLoading};
  }

  std::unordered_map<const void*, ParameterBytes::Record> deferred;
  for (auto& [impl, use] : uses) {
    const void* data = use.storage.data_ptr().get();
    uint64_t offset = unfilled.at(data).offset;
    // Held by the walk's copy and by each tensor found; any other holder could read it.
    bool heldOnlyByParameters = use.storage.use_count() == use.tensors.size() + 1;
    if (use.onlyParameterSlots && heldOnlyByParameters) {
      deferred.emplace(data, ParameterBytes::Record{use.storage, offset});
    } else {
      readFully(fd, offset, use.storage.data_ptr().get(), use.storage.nbytes(), path);
    }
  }
  uses.clear();
  return {std::move(module), std::make_shared<ParameterBytes>(path, fd, static_cast<size_t>(info.st_size), std::move(deferred)),
          ""};
}

}  // namespace fsdp_opt
