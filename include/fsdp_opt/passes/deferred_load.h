// Loading a TorchScript archive without reading its parameters' bytes, so that `fsdp-opt -o`
// never holds the whole model: the pipeline needs only the parameters' shapes and dtypes, and
// each rank file needs only its rows (issue 18, item 2; docs/design.md, "Writing rank files without holding the model").
//
// A TorchScript archive is a zip file whose tensors are separate stored (uncompressed) records.
// loadDeferringParameters loads the module as torch::jit::load does, except that the records
// that hold nothing but parameters are not copied in: their storages are allocated and left
// unread ("deferred"), and ParameterBytes reads a deferred tensor's rows from the archive when
// the writer cuts a shard. Every other tensor (buffers, attributes, constants, a storage that a
// parameter shares with anything else) is read at load, as torch::jit::load reads it.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace fsdp_opt {

class ParameterBytes {
 public:
  struct Record {
    c10::Storage storage;
    uint64_t fileOffset = 0;
  };
  // `fd` is the archive, open for reading, of `fileSize` bytes; ParameterBytes closes it.
  ParameterBytes(std::string path, int fd, size_t fileSize, std::unordered_map<const void*, Record> deferred);
  ~ParameterBytes();
  ParameterBytes(const ParameterBytes&) = delete;
  ParameterBytes& operator=(const ParameterBytes&) = delete;

  // Rows [begin, begin + count) of a deferred `tensor` along dim 0 when they are one run of
  // bytes (dense: contiguous, or channels_last): a read-only tensor over the archive's pages with
  // the rows' strides, no copy (the saver reads them straight from the page cache). Undefined
  // otherwise.
  at::Tensor rowsInPlace(const at::Tensor& tensor, int64_t begin, int64_t count) const;
  // Copies rows [begin, begin + count) of `tensor` along dim 0 into `out` (of the rows' shape,
  // any strides); a deferred tensor's rows are read from the archive, only the bytes they span.
  void copyRows(const at::Tensor& tensor, int64_t begin, int64_t count, at::Tensor& out) const;
  // Drops the archive's pages from this process (they stay in the page cache): called once the
  // rank files are written.
  void releasePages() const;
  // Drops the pages of the archive that [data, data + size) spans, if it lies in the archive:
  // called once a record read in place is written, so that in-place rows count against the
  // records in flight only. Safe while other threads read the archive (they fault pages in again).
  void releasePagesOf(const void* data, size_t size) const;
  // Reads `tensor`'s storage into place if it is deferred; afterwards it is an ordinary tensor.
  void materialize(const at::Tensor& tensor);
  // Storages and bytes still unread.
  size_t deferredCount() const { return deferred_.size(); }
  int64_t deferredBytes() const;

 private:
  struct Mapping;
  // The record of `tensor`'s storage while it is unread; null once read (or never deferred).
  const Record* recordOf(const at::Tensor& tensor) const;
  void readAt(uint64_t offset, void* into, size_t bytes) const;
  // Storage elements [first, last] the rows span, and the byte offset of `first` in the file.
  struct Span {
    int64_t first, last;
    uint64_t fileOffset;
  };
  Span spanOf(const Record& record, const at::Tensor& rows) const;
  std::string path_;
  int fd_;
  std::shared_ptr<Mapping> mapping_;
  std::unordered_map<const void*, Record> deferred_;
};

struct DeferredLoad {
  torch::jit::Module module;
  // Null when the archive was loaded whole (a format other than the zip archive, or a module
  // whose loading may have looked at parameter values: see deferred_load.cpp); then
  // `loadedWholeBecause` says why.
  std::shared_ptr<ParameterBytes> parameters;
  std::string loadedWholeBecause;
};

// Throws what torch::jit::load throws for a file that is not a TorchScript module.
DeferredLoad loadDeferringParameters(const std::string& path);

// Every tensor reachable from `root` through object attributes, lists, dicts and tuples, with
// whether it sits in a module's parameter slot.
void forEachReachableTensor(const c10::IValue& root,
                            const std::function<void(const at::Tensor&, bool isParameterSlot)>& visit);

}  // namespace fsdp_opt
