// Writes rewritten modules to disk, atomically: the ranks are cut one at a time and their files
// written by up to two threads at once.
//
// The rewritten methods are the same on every rank; only the parameter slots of unit groups
// (rank r's shard) and the root's rank attributes differ. So the writer swaps shards into the
// slots, saves, and moves on; every slot of a tied parameter gets the SAME shard tensor, which
// TorchScript's pickler stores once and loads as one tensor, so ties survive.
//
// Since only the data archive (data.pkl and its tensors) differs between ranks, the code is
// saved once, by torch::jit::save, in a template: the module with every unit slot empty. Every
// rank file then takes its code, debug and constants records from the template instead of
// printing the same code again (saveReusingCode; at W = 8 printing and compressing the code was
// about a seventh of a run), and is written tensor records first, data.pkl last: the manifest's
// hash, which data.pkl holds, needs the input's hash, which may still be being computed. The
// template is used only if pickling it here gives exactly the data.pkl torch wrote for it;
// otherwise every rank is saved by torch, once the manifest is known.
//
// Every file goes out in writes of at most 256 KiB (kWriteBytes), through PyTorchStreamWriter's
// writer function; its zip entries therefore sit in the folder "archive/", as in any save to a
// stream, instead of one named after the file. Readers ignore the folder's name.
#include <fsdp_opt/passes/deferred_load.h>
#include <fsdp_opt/passes/output.h>

#include "../ir/fsdp_ops.h"
#include "../ir/module_tree.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/type_name_uniquer.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <future>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <sys/stat.h>
#include <unistd.h>

namespace fsdp_opt {
namespace fs = std::filesystem;
namespace {

// A temporary path beside `target`, so the final rename stays on one file system.
fs::path temporarySibling(const fs::path& target, bool directory) {
  fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(parent)) {
    throw std::runtime_error("output directory '" + parent.string() + "' does not exist");
  }
  std::string pattern = (parent / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (directory) {
    if (!mkdtemp(buffer.data())) throw std::runtime_error("cannot create a temporary directory in '" + parent.string() + "'");
  } else {
    int fd = mkstemp(buffer.data());
    if (fd < 0) throw std::runtime_error("cannot create a temporary file in '" + parent.string() + "'");
    close(fd);
  }
  return fs::path(buffer.data());
}

// mkstemp/mkdtemp create private entries; outputs get the permissions the umask gives.
void applyUmask(const fs::path& path, bool directory) {
  mode_t mask = umask(0);
  umask(mask);
  auto mode = static_cast<fs::perms>((directory ? 0777 : 0666) & ~mask);
  fs::permissions(path, mode);
}

// A previous fsdp-opt output: its manifest.json says so. A directory that merely holds some
// other manifest.json (a web app's, a dataset's) is the user's and is never replaced.
bool isFsdpOptOutput(const fs::path& dir) {
  std::ifstream in(dir / kManifestFile);
  if (!in) return false;
  auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return manifest.is_object() && manifest.value("tool", "") == "fsdp-opt" &&
         manifest.contains("format_version");
}

// Whatever the saver will pickle from `module` gets its bytes: the writer defers only the rows
// it cuts itself, so a parameter that a pass also put elsewhere is never saved unread.
void materializeReachable(const torch::jit::Module& module, ParameterBytes* bytes) {
  if (!bytes) return;
  forEachReachableTensor(module._ivalue(), [&](const at::Tensor& tensor, bool) { bytes->materialize(tensor); });
}

// Rank files written at once, each on a thread of its own: writing one is the zip records'
// CRC-32 and the kernel's copy into the page cache, both on the writing thread. On this
// project's 2-core machine, with the input's hash on the other core for most of the run, two
// writers took a 1.06 GiB model at W = 8 from 2.17-2.22 s to 1.95-2.02 s and left W = 2 as it
// was (1.9 s). The bound is also a memory bound: each file in flight holds its rank's shards
// that could not be read in place.
constexpr size_t kRankFilesInFlight = 2;

// Files are written in pieces of this size. The page cache allocates folios as large as a write
// allows, and on a virtual machine whose balloon device hands free memory back to the host the
// large ones come from blocks the host has taken back: writing 1 GiB in one write(2) took 4.2-6.9
// s on this project's machine, in 128-512 KiB writes 0.26-0.30 s (and 0.4 s in one write into
// memory freed just before). torch's saver hands each record to one write (docs/benchmarks.md
// section 7).
constexpr size_t kWriteBytes = 256 * 1024;

// A file written through PyTorchStreamWriter's writer function, in pieces of kWriteBytes. A
// failed write is not reported to the zip writer: it would throw, and throw again from its
// destructor (which finishes the archive), ending the process. The writer function takes
// every later byte without writing it, and throwIfFailed() says why with the system's reason.
class PieceWriter {
 public:
  explicit PieceWriter(const std::string& path)
      : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) {
    if (fd_ < 0) throw std::runtime_error(failure(errno));
  }
  ~PieceWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  PieceWriter(const PieceWriter&) = delete;
  PieceWriter& operator=(const PieceWriter&) = delete;

  size_t write(const void* data, size_t size) {
    const char* next = static_cast<const char*>(data);
    size_t left = error_ == 0 ? size : 0;
    while (left > 0) {
      const ssize_t wrote = ::write(fd_, next, std::min(left, kWriteBytes));
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) {
        error_ = wrote < 0 ? errno : EIO;
        break;
      }
      next += wrote;
      left -= static_cast<size_t>(wrote);
    }
    return size;
  }
  std::function<size_t(const void*, size_t)> function() {
    return [this](const void* data, size_t size) { return write(data, size); };
  }
  void throwIfFailed() const {
    if (error_ != 0) throw std::runtime_error(failure(error_));
  }
  // Closes the file once everything is written, with what close(2) reports.
  void close() {
    throwIfFailed();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw std::runtime_error(failure(errno));
  }

 private:
  std::string failure(int error) const { return fs::path(path_).filename().string() + ": " + std::strerror(error); }
  std::string path_;
  int fd_;
  int error_ = 0;
};

// torch::jit::save, written in pieces.
void saveInPieces(const torch::jit::Module& module, const std::string& path,
                  const torch::jit::ExtraFilesMap& extraFiles = {}) {
  PieceWriter file(path);
  torch::jit::ExportModule(module, file.function(), extraFiles);
  file.close();
}

// A written rank's shards are freed before the next rank's are cut; glibc keeps freed heap pages
// mapped, and would otherwise hold up to every rank's shards at once.
void returnFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// Points every slot of `param` (each name a tied parameter has) at `value`: one tensor, so the
// pickler stores it once and the tie survives.
void setSlots(const ModuleIndex& index, const GroupParam& param, const at::Tensor& value) {
  for (const auto& slot : param.slots) index.find(slot.ownerPath)->_ivalue()->setAttr(slot.name, value);
}

// The root's attributes that say which rank of `mesh` this module is (check_rank reads them).
void setRankAttributes(torch::jit::Module& module, const Mesh& mesh, int64_t rank) {
  module.setattr(kRankAttr, rank);
  module.setattr(kWorldSizeAttr, mesh.worldSize);
  // An HSDP file's shard group size, beside its rank (wrap-entry-methods added the attribute).
  if (module.hasattr(kShardGroupSizeAttr)) module.setattr(kShardGroupSizeAttr, mesh.shardGroupSize);
}

// makeRankModule with the module's index built once by a caller that makes several ranks.
void makeRankModuleIndexed(torch::jit::Module& module, const ModuleIndex& index, const FsdpPlan& plan,
                           const Mesh& mesh, int64_t rank, const FullTensorOf& fullOf, const ParameterBytes* bytes) {
  for (const auto& unit : plan.units) {
    for (const auto& param : unit.params) {
      const at::Tensor& full = fullOf ? fullOf(param) : param.tensor;
      setSlots(index, param, makeShard(full, mesh.shardOf(rank), mesh.shardGroupSize, bytes));
    }
  }
  setRankAttributes(module, mesh, rank);
}

// Records a PyTorchStreamWriter writes by itself when the archive is finished.
bool writtenByTheWriter(const std::string& record) {
  return record == "version" || record == ".data/version" || record == "byteorder" ||
         record == ".data/serialization_id";
}

// data/<n>: a tensor of data.pkl.
bool isDataTensorRecord(const std::string& record) { return record.rfind("data/", 0) == 0; }

bool isDataRecord(const std::string& record) { return record == "data.pkl" || isDataTensorRecord(record); }

// The data archive of `module` as torch::jit::save pickles it: data.pkl, whose tensors are the
// records data/0, data/1, ... in the order the pickler meets their storages, and classes named
// by a type-name uniquer of its own. The saver's uniquer also meets them first here, before it
// prints any code, so the names are the ones the saver's code records declare.
struct DataArchive {
  std::vector<char> pickle;
  std::vector<at::Tensor> tensors;  // data/<i> holds tensors[i]'s storage
};

DataArchive pickleDataArchive(const torch::jit::Module& module) {
  DataArchive archive;
  torch::jit::TypeNameUniquer uniquer;
  std::vector<c10::ClassTypePtr> classes;
  size_t storages = 0;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { archive.pickle.insert(archive.pickle.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, [&](const c10::ClassTypePtr& type) { return uniquer.getUniqueName(type); },
      &classes, [&](const at::Tensor&) { return std::to_string(storages++); });
  pickler.protocol();
  pickler.pushIValue(module._ivalue());
  pickler.stop();
  archive.tensors = pickler.tensorData();
  return archive;
}

std::vector<const c10::StorageImpl*> storagesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<const c10::StorageImpl*> storages;
  for (const at::Tensor& tensor : tensors) storages.push_back(tensor.storage().unsafeGetStorageImpl());
  return storages;
}

// A rank file's data archive, ready for a writer: its tensor records, held as storages rather
// than tensors (the pickler memoises a tensor that something else also references, and data.pkl
// must be byte for byte what torch would write), and data.pkl unless it waits for beforePickle.
struct PreparedArchive {
  std::vector<c10::Storage> records;
  std::vector<const c10::StorageImpl*> written;  // the records' storages, to check data.pkl against
  std::vector<char> pickle;                      // final unless tensorsFirst
  bool tensorsFirst = false;                     // data.pkl is pickled after beforePickle runs
};

// Pickles `module`'s data archive. With `beforePickle` (which may set attributes that are not
// tensors, such as a hash still on its way), the tensor records can go out before it runs and
// data.pkl is pickled after it (finalPickle), unless a class's __getstate__ builds new tensors
// each time it is pickled (a second pickle, made while the first still holds its tensors, names
// other storages): then beforePickle runs first and the archive is final at once.
PreparedArchive prepareArchive(const torch::jit::Module& module, const std::function<void()>& beforePickle) {
  DataArchive archive = pickleDataArchive(module);
  PreparedArchive prepared;
  prepared.tensorsFirst = beforePickle && storagesOf(pickleDataArchive(module).tensors) == storagesOf(archive.tensors);
  if (beforePickle && !prepared.tensorsFirst) {
    archive = DataArchive();
    beforePickle();
    archive = pickleDataArchive(module);
  }
  for (const at::Tensor& tensor : archive.tensors) prepared.records.push_back(tensor.storage());
  prepared.written = storagesOf(archive.tensors);
  prepared.pickle = std::move(archive.pickle);
  return prepared;  // `archive`, and with it every reference to the module's tensors, goes here
}

// data.pkl of `module`, whose tensor records `written` already went out: the same storages, or
// the file would name records it does not hold.
std::vector<char> finalPickle(const torch::jit::Module& module, const std::vector<const c10::StorageImpl*>& written) {
  DataArchive archive = pickleDataArchive(module);
  if (storagesOf(archive.tensors) != written) {
    throw std::logic_error("saveReusingCode: the module's tensors changed while its data archive was written");
  }
  return std::move(archive.pickle);
}

// Writes a rank file: `records` as data/0, data/1, ..., then data.pkl (`dataPickle` may wait for
// it), then every record of `codeSource` that is not data (code, debug info, constants, extra
// files), stored. The input's pages a record
// was read from are dropped from this process as soon as it is written, so that a rank file
// holds at most the records in flight.
void writeRankFile(const std::vector<c10::Storage>& records, const std::function<std::vector<char>()>& dataPickle,
                   const std::string& codeSource, const std::string& path, const ParameterBytes* bytes) {
  PieceWriter file(path);
  // Finished (or, on an exception, destroyed) before the file is closed.
  caffe2::serialize::PyTorchStreamWriter writer(file.function());
  for (size_t i = 0; i < records.size(); ++i) {
    const c10::Storage& storage = records[i];
    // A tensor of its own over the storage: getWriteableTensorData copies one that is not on
    // the CPU, and this thread must not add a reference to a tensor the module holds.
    at::Tensor bytesOf = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()));
    bytesOf.set_(storage, 0, {static_cast<int64_t>(storage.nbytes())}, {1});
    const torch::jit::WriteableTensorData data = torch::jit::getWriteableTensorData(bytesOf);
    writer.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
    file.throwIfFailed();
    if (bytes) bytes->releasePagesOf(data.data(), data.sizeInBytes());
  }
  const std::vector<char> pickle = dataPickle();
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  // Stored, not compressed again: tens of KiB of code, and compressing it was most of its cost.
  caffe2::serialize::PyTorchStreamReader source(codeSource);
  for (const std::string& record : source.getAllRecords()) {
    if (isDataRecord(record) || writtenByTheWriter(record)) continue;
    const auto [data, size] = source.getRecord(record);
    writer.writeRecord(record, data.get(), size);
  }
  writer.setMinVersion(source.version());
  writer.writeEndOfFile();
  file.close();
}

}  // namespace

bool picklesAsSaved(const torch::jit::Module& module, const std::string& savedFile) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(savedFile);
    size_t dataRecords = 0;
    for (const std::string& record : reader.getAllRecords()) {
      if (isDataTensorRecord(record)) ++dataRecords;
    }
    const DataArchive archive = pickleDataArchive(module);
    const auto [saved, size] = reader.getRecord("data.pkl");
    return archive.tensors.size() == dataRecords && size == archive.pickle.size() &&
           std::memcmp(saved.get(), archive.pickle.data(), size) == 0;
  } catch (const std::exception&) {
    return false;  // an archive this torch cannot read back: no sharing
  }
}

void saveReusingCode(const torch::jit::Module& module, const std::string& codeSource, const std::string& path,
                     const std::function<void()>& beforePickle) {
  PreparedArchive prepared = prepareArchive(module, beforePickle);
  writeRankFile(
      prepared.records,
      [&] {
        if (!prepared.tensorsFirst) return std::move(prepared.pickle);
        beforePickle();
        return finalPickle(module, prepared.written);
      },
      codeSource, path, nullptr);
}

namespace {

// The strides of `full`'s shards of `rows` rows when they keep its layout (format.h, "memory
// layout of a shard"); empty when the shards are contiguous.
std::vector<int64_t> layoutKeepingStrides(const at::Tensor& full, int64_t rows) {
  const int64_t dims = full.dim();
  if (dims < 2 || full.size(0) == 0 || hasRowMajorStrides(full.sizes().data(), full.strides().data(), dims) ||
      !full.is_non_overlapping_and_dense()) {
    return {};
  }
  std::vector<int64_t> strides(dims), back(dims);
  std::vector<int64_t> shardSizes = full.sizes().vec();
  shardSizes[0] = rows;
  stridesForRows(full.sizes().data(), full.strides().data(), dims, full.size(0), rows, strides.data());
  stridesForRows(shardSizes.data(), strides.data(), dims, rows, full.size(0), back.data());
  if (!std::equal(back.begin(), back.end(), full.strides().begin())) return {};
  return strides;
}

}  // namespace

at::Tensor makeShard(const at::Tensor& full, int64_t rank, int64_t worldSize, const ParameterBytes* bytes) {
  at::NoGradGuard noGrad;
  const int64_t rows = full.size(0);
  const int64_t chunk = shardRows(rows, worldSize);
  std::vector<int64_t> shape = full.sizes().vec();
  shape[0] = chunk;
  const int64_t begin = shardRowBegin(rows, worldSize, rank);
  const int64_t count = shardValidRows(rows, worldSize, rank);
  const std::vector<int64_t> strides = layoutKeepingStrides(full, chunk);
  if (bytes && count == chunk) {
    at::Tensor inPlace = bytes->rowsInPlace(full, begin, count);
    const bool sameLayout =
        inPlace.defined() &&
        (strides.empty() ? hasRowMajorStrides(inPlace.sizes().data(), inPlace.strides().data(), inPlace.dim())
                         : inPlace.strides().equals(strides));
    if (sameLayout) {
      inPlace.set_requires_grad(full.requires_grad());
      return inPlace;
    }
  }
  at::Tensor shard;
  if (!strides.empty()) {
    shard = at::empty_strided(shape, strides, full.options().requires_grad(false));
    if (!shard.is_non_overlapping_and_dense()) shard = at::Tensor();
  }
  if (!shard.defined()) shard = at::empty(shape, full.options().requires_grad(false));
  at::Tensor filled = shard.narrow(0, 0, count);
  if (count > 0) {
    if (bytes) {
      bytes->copyRows(full, begin, count, filled);
    } else {
      filled.copy_(full.narrow(0, begin, count));
    }
  }
  if (count < chunk) shard.narrow(0, count, chunk - count).zero_();
  shard.set_requires_grad(full.requires_grad());
  return shard;
}

void makeRankModule(torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh, int64_t rank,
                    const FullTensorOf& fullOf, const ParameterBytes* bytes) {
  makeRankModuleIndexed(module, ModuleIndex(module), plan, mesh, rank, fullOf, bytes);
}

torch::jit::ExtraFilesMap readExtraFiles(const std::string& path) {
  const std::string prefix = "extra/";
  caffe2::serialize::PyTorchStreamReader reader(path);
  torch::jit::ExtraFilesMap files;
  for (const std::string& record : reader.getAllRecords()) {
    if (record.rfind(prefix, 0) != 0) continue;
    const auto [data, size] = reader.getRecord(record);
    files.emplace(record.substr(prefix.size()), std::string(static_cast<const char*>(data.get()), size));
  }
  return files;
}

void writeSingleFile(torch::jit::Module& module, const std::string& manifestSha256,
                     const std::string& path, ParameterBytes* bytes, const torch::jit::ExtraFilesMap& extraFiles) {
  fs::path target(path);
  if (fs::is_directory(target)) throw std::runtime_error("output '" + path + "' is a directory; with --world-size=1 -o names a .pt file");
  fs::path temporary = temporarySibling(target, /*directory=*/false);
  try {
    setRankAttributes(module, Mesh{1, 1}, 0);
    module.setattr(kManifestHashAttr, manifestSha256);
    materializeReachable(module, bytes);
    saveInPieces(module, temporary.string(), extraFiles);
    applyUmask(temporary, /*directory=*/false);
    fs::rename(temporary, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

void writeShardedDirectory(torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh,
                           const std::function<std::string()>& manifestText, const std::string& dir,
                           ParameterBytes* bytes, const torch::jit::ExtraFilesMap& extraFiles) {
  fs::path target(dir);
  while (target.has_parent_path() && target.filename().empty()) target = target.parent_path();
  if (fs::exists(target) && !fs::is_directory(target)) {
    throw std::runtime_error("output '" + dir + "' exists and is not a directory");
  }
  bool replacing = fs::exists(target);
  if (replacing && !fs::is_empty(target) && !isFsdpOptOutput(target)) {
    throw std::runtime_error("output directory '" + dir + "' is not empty and holds no fsdp-opt output; refusing to replace it");
  }
  ModuleIndex index(module);
  fs::path temporary = temporarySibling(target, /*directory=*/true);
  auto restoreSlots = [&] {
    for (const auto& unit : plan.units) {
      for (const auto& param : unit.params) setSlots(index, param, param.tensor);
    }
  };
  std::optional<std::string> manifest;  // asked for when first needed
  auto manifestOnce = [&]() -> const std::string& {
    if (!manifest) manifest = manifestText();
    return *manifest;
  };
  auto setManifestHash = [&] { module.setattr(kManifestHashAttr, sha256Hex(manifestOnce())); };
  std::deque<std::future<void>> writing;  // rank files being written, oldest first
  auto waitForOldest = [&] {
    std::future<void> oldest = std::move(writing.front());
    writing.pop_front();
    oldest.get();
    returnFreedMemory();
  };
  try {
    // The code (and the extra files) every rank file shares. Its unit slots are empty, so it
    // writes no rows; what else the module holds (buffers, parameters of no unit) it writes once
    // more than the ranks do.
    const std::string codeTemplate = (temporary / "code_template.pt").string();
    for (const auto& unit : plan.units) {
      for (const auto& param : unit.params) {
        setSlots(index, param, at::empty({0}, param.tensor.options().requires_grad(false)));
      }
    }
    setRankAttributes(module, mesh, 0);
    materializeReachable(module, bytes);
    saveInPieces(module, codeTemplate, extraFiles);
    const bool reuseCode = picklesAsSaved(module, codeTemplate);
    restoreSlots();
    for (int64_t rank = 0; rank < mesh.worldSize; ++rank) {
      if (writing.size() == kRankFilesInFlight) waitForOldest();
      makeRankModuleIndexed(module, index, plan, mesh, rank, nullptr, bytes);
      materializeReachable(module, bytes);
      const std::string file = (temporary / rankFileName(rank)).string();
      if (!reuseCode) {
        setManifestHash();
        saveInPieces(module, file, extraFiles);
      } else {
        // With the hash still on its way, the tensors go out now and data.pkl once it is known.
        std::function<void()> beforePickle;
        if (manifest) {
          setManifestHash();  // known since an earlier rank
        } else {
          beforePickle = setManifestHash;
        }
        PreparedArchive prepared = prepareArchive(module, beforePickle);
        std::promise<std::vector<char>> pickle;
        std::future<std::vector<char>> pickled = pickle.get_future();
        if (!prepared.tensorsFirst) pickle.set_value(std::move(prepared.pickle));
        // Everything by value but `bytes` (the caller's): when this loop throws, its locals are
        // gone before the writers are waited for.
        writing.push_back(std::async(std::launch::async, [records = std::move(prepared.records),
                                                          pickled = std::move(pickled), codeTemplate, file,
                                                          bytes]() mutable {
          writeRankFile(records, [&] { return pickled.get(); }, codeTemplate, file, bytes);
        }));
        if (prepared.tensorsFirst) {
          beforePickle();
          pickle.set_value(finalPickle(module, prepared.written));
        }
      }
      restoreSlots();
    }
    while (!writing.empty()) waitForOldest();
    if (bytes) bytes->releasePages();
    fs::remove(codeTemplate);
    std::ofstream(temporary / kManifestFile) << manifestOnce();
    applyUmask(temporary, /*directory=*/true);
    if (replacing) {
      fs::path previous = temporarySibling(target, /*directory=*/true);
      fs::remove(previous);
      fs::rename(target, previous);
      fs::rename(temporary, target);
      fs::remove_all(previous);
    } else {
      fs::rename(temporary, target);
    }
  } catch (...) {
    // A writer still waiting for its data.pkl has been told why (its promise is gone).
    for (std::future<void>& inFlight : writing) {
      try {
        inFlight.get();
      } catch (...) {
      }
    }
    restoreSlots();
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw;
  }
}

}  // namespace fsdp_opt
