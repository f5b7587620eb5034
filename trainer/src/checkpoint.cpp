// Checkpoint files (checkpoint.h).
#include "megascale/trainer/checkpoint.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "file_io.h"

namespace megascale::trainer {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian; so is this code");

constexpr char kMagic[8] = {'M', 'S', 'C', 'K', 'P', 'T', '\0', '\0'};
// 2 added the layout; 3: data-parallel ranks hold their piece of each layer's slice of the optimizer
// state (grad_buckets.h), not a contiguous part of the flat buffer. Version 2 is read when dp is 1.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxRank = 16;
constexpr uint32_t kMaxRngWords = 1 << 16;

// FNV-1a (Fowler, Noll, Vo) over 64-bit little-endian words, the tail zero-padded: eight bytes per
// multiply, so hashing a 15 GB checkpoint costs seconds, not tens of seconds. Detects truncation and
// corruption; it is not a defence against deliberate tampering.
class WordHash {
 public:
  void update(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (bytes > 0 && pending_bytes_ > 0) {
      take(*p++);
      --bytes;
    }
    while (bytes >= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      mix(word);
      p += 8;
      bytes -= 8;
    }
    while (bytes-- > 0) take(*p++);
  }
  uint64_t digest() const {
    uint64_t h = hash_;
    if (pending_bytes_ > 0) h = (h ^ pending_) * kPrime;
    return h;
  }

 private:
  static constexpr uint64_t kOffset = 0xcbf29ce484222325ULL;
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  void mix(uint64_t word) { hash_ = (hash_ ^ word) * kPrime; }
  void take(unsigned char byte) {
    pending_ |= uint64_t{byte} << (8 * pending_bytes_);
    if (++pending_bytes_ == 8) {
      mix(pending_);
      pending_ = 0;
      pending_bytes_ = 0;
    }
  }
  uint64_t hash_ = kOffset;
  uint64_t pending_ = 0;
  int pending_bytes_ = 0;
};

class Encoder {
 public:
  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&value);
    bytes_.append(p, sizeof(T));
  }
  void put_bytes(std::string_view s) { bytes_.append(s); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Decoder {
 public:
  Decoder(const std::string& bytes, std::string path) : bytes_(bytes), path_(std::move(path)) {}
  template <class T>
  bool get(T& value) {
    if (pos_ + sizeof(T) > bytes_.size()) return fail();
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_bytes(size_t n, std::string& out) {
    if (pos_ + n > bytes_.size()) return fail();
    out.assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  const std::string& bytes_;
  std::string path_;
  size_t pos_ = 0;
  bool ok_ = true;
};

int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string encode_header_fields(const CheckpointHeader& h) {
  Encoder e;
  const ModelConfig& m = h.model;
  for (int32_t v : {m.vocab_size, m.padded_vocab_size, m.max_seq_len, m.n_layer, m.n_head, m.d_model,
                    int32_t{m.parallel_block}, m.attention_window}) {
    e.put<int32_t>(v);
  }
  const TrainEssentials& t = h.train;
  for (int32_t v : {t.batch_size, t.seq_len, t.grad_accum_steps, t.total_steps}) e.put<int32_t>(v);
  e.put<uint32_t>(static_cast<uint32_t>(t.optimizer));
  e.put<uint32_t>(static_cast<uint32_t>(t.dtype));
  e.put<uint64_t>(t.seed);
  e.put<int64_t>(h.step);
  e.put<uint32_t>(static_cast<uint32_t>(h.rng_state.size()));
  for (uint64_t w : h.rng_state) e.put<uint64_t>(w);
  e.put<int64_t>(h.loader.shard);
  e.put<int64_t>(h.loader.offset_tokens);
  for (int32_t v : {h.layout.tp, h.layout.pp, h.layout.dp, h.layout.vpp, h.rank.tp, h.rank.dp, h.rank.pp}) {
    e.put<int32_t>(v);
  }
  return e.bytes();
}

// The parsed front of a file: header, then the tensor table.
struct TableEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // of its data, from the start of the file
};

struct Front {
  CheckpointHeader header;
  std::vector<TableEntry> table;
  int64_t data_end = 0;  // where the hash starts
  std::string bytes;     // every byte before the data (hashed first)
};

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

Status read_exact(std::FILE* f, void* out, size_t bytes, const std::string& path, const char* what) {
  if (std::fread(out, 1, bytes, f) != bytes) {
    return make_error(fmt::format("{}: truncated checkpoint: the file ends inside {}", path, what));
  }
  return {};
}

Result<Front> read_front(std::FILE* f, const std::string& path, int64_t file_size) {
  Front front;
  char magic[8];
  uint32_t version = 0, header_bytes = 0;
  if (Status s = read_exact(f, magic, 8, path, "the magic"); !s) return s.error();
  if (std::memcmp(magic, kMagic, 8) != 0)
    return make_error(fmt::format("{}: not a megascale checkpoint (wrong magic)", path));
  if (Status s = read_exact(f, &version, 4, path, "the version"); !s) return s.error();
  if (version != kVersion && version != 2) {
    return make_error(
        fmt::format("{}: checkpoint version {}, this build reads version {}", path, version, kVersion));
  }
  if (Status s = read_exact(f, &header_bytes, 4, path, "the header size"); !s) return s.error();
  if (header_bytes > file_size)
    return make_error(fmt::format("{}: truncated checkpoint: header of {} bytes", path, header_bytes));
  std::string fields(header_bytes, '\0');
  if (Status s = read_exact(f, fields.data(), header_bytes, path, "the header"); !s) return s.error();

  Decoder d(fields, path);
  CheckpointHeader& h = front.header;
  int32_t parallel = 0;
  uint32_t optimizer = 0, dtype = 0, rng_words = 0;
  d.get(h.model.vocab_size), d.get(h.model.padded_vocab_size), d.get(h.model.max_seq_len);
  d.get(h.model.n_layer), d.get(h.model.n_head), d.get(h.model.d_model), d.get(parallel);
  d.get(h.model.attention_window);
  d.get(h.train.batch_size), d.get(h.train.seq_len), d.get(h.train.grad_accum_steps),
      d.get(h.train.total_steps);
  d.get(optimizer), d.get(dtype), d.get(h.train.seed), d.get(h.step), d.get(rng_words);
  if (!d.ok() || rng_words > kMaxRngWords || optimizer > 1 || dtype > 1 || parallel < 0 || parallel > 1) {
    return make_error(fmt::format("{}: corrupt checkpoint header", path));
  }
  h.model.parallel_block = parallel == 1;
  h.train.optimizer = static_cast<OptimizerKind>(optimizer);
  h.train.dtype = static_cast<ComputeDtype>(dtype);
  h.rng_state.resize(rng_words);
  for (uint64_t& w : h.rng_state) d.get(w);
  d.get(h.loader.shard), d.get(h.loader.offset_tokens);
  d.get(h.layout.tp), d.get(h.layout.pp), d.get(h.layout.dp), d.get(h.layout.vpp);
  d.get(h.rank.tp), d.get(h.rank.dp), d.get(h.rank.pp);
  const ParallelLayout& l = h.layout;
  const RankCoords& r = h.rank;
  if (!d.ok() || l.tp < 1 || l.pp < 1 || l.dp < 1 || l.vpp < 1 || r.tp < 0 || r.tp >= l.tp || r.dp < 0 ||
      r.dp >= l.dp || r.pp < 0 || r.pp >= l.pp) {
    return make_error(fmt::format("{}: corrupt checkpoint header (layout)", path));
  }
  if (!d.ok() || d.remaining() != 0) return make_error(fmt::format("{}: corrupt checkpoint header", path));
  if (version == 2 && l.dp > 1) {
    return make_error(
        fmt::format("{}: checkpoint version 2 of {} data-parallel ranks: its ranks held contiguous parts of "
                    "the optimizer "
                    "state, this build (version {}) holds a piece of each layer's slice; resume with the "
                    "build that wrote it",
                    path, l.dp, kVersion));
  }

  Encoder front_bytes;
  front_bytes.put_bytes(std::string_view(kMagic, 8));
  front_bytes.put(version);
  front_bytes.put(header_bytes);
  front_bytes.put_bytes(fields);

  uint32_t count = 0;
  if (Status s = read_exact(f, &count, 4, path, "the tensor count"); !s) return s.error();
  front_bytes.put(count);
  int64_t expected_offset = -1;
  for (uint32_t i = 0; i < count; ++i) {
    TableEntry entry;
    uint32_t name_bytes = 0, rank = 0;
    if (Status s = read_exact(f, &name_bytes, 4, path, "the tensor table"); !s) return s.error();
    if (name_bytes > kMaxNameBytes)
      return make_error(fmt::format("{}: corrupt tensor table (entry {})", path, i));
    entry.name.resize(name_bytes);
    if (Status s = read_exact(f, entry.name.data(), name_bytes, path, "the tensor table"); !s)
      return s.error();
    if (Status s = read_exact(f, &rank, 4, path, "the tensor table"); !s) return s.error();
    if (rank > kMaxRank)
      return make_error(fmt::format("{}: corrupt tensor table (tensor '{}')", path, entry.name));
    entry.shape.resize(rank);
    if (Status s = read_exact(f, entry.shape.data(), rank * 8, path, "the tensor table"); !s)
      return s.error();
    if (Status s = read_exact(f, &entry.offset, 8, path, "the tensor table"); !s) return s.error();
    for (int64_t dim : entry.shape) {
      if (dim < 0 || dim > (int64_t{1} << 40)) {
        return make_error(fmt::format("{}: corrupt tensor table (tensor '{}')", path, entry.name));
      }
    }
    front_bytes.put(name_bytes);
    front_bytes.put_bytes(entry.name);
    front_bytes.put(rank);
    for (int64_t dim : entry.shape) front_bytes.put(dim);
    front_bytes.put(entry.offset);
    if (expected_offset >= 0 && entry.offset != expected_offset) {
      return make_error(fmt::format("{}: corrupt tensor table (tensor '{}')", path, entry.name));
    }
    expected_offset = entry.offset + 4 * numel(entry.shape);
    front.table.push_back(std::move(entry));
  }
  const int64_t data_start = static_cast<int64_t>(front_bytes.bytes().size());
  if (!front.table.empty() && front.table.front().offset != data_start) {
    return make_error(fmt::format("{}: corrupt tensor table", path));
  }
  front.data_end = front.table.empty() ? data_start : expected_offset;
  if (file_size != front.data_end + 8) {
    return make_error(fmt::format("{}: {} checkpoint: {} bytes, the table says {}", path,
                                  file_size < front.data_end + 8 ? "truncated" : "corrupt", file_size,
                                  front.data_end + 8));
  }
  front.bytes = front_bytes.bytes();
  return front;
}

Result<int64_t> file_size_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error(fmt::format("{}: cannot open checkpoint: {}", path, detail::errno_text(errno)));
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

TrainEssentials essentials_of(const TrainConfig& t) {
  return {t.batch_size, t.seq_len, t.grad_accum_steps, t.steps, t.optimizer, t.dtype, t.seed};
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i == 0 ? "" : ", ", shape[i]);
  return out + "]";
}

Status save_checkpoint(const std::string& path, const CheckpointHeader& header,
                       std::span<const TensorView> tensors) {
  std::set<std::string> names;
  for (const TensorView& t : tensors) {
    if (!names.insert(t.name).second)
      return make_error(fmt::format("{}: tensor '{}' given twice", path, t.name));
    if (t.name.size() > kMaxNameBytes || t.shape.size() > kMaxRank) {
      return make_error(fmt::format("{}: tensor '{}': name or rank too large", path, t.name));
    }
    for (int64_t d : t.shape) {
      if (d < 0)
        return make_error(
            fmt::format("{}: tensor '{}': negative dimension in {}", path, t.name, shape_string(t.shape)));
    }
    if (numel(t.shape) != static_cast<int64_t>(t.data.size())) {
      return make_error(fmt::format("{}: tensor '{}': shape {} has {} elements but the data has {}", path,
                                    t.name, shape_string(t.shape), numel(t.shape), t.data.size()));
    }
  }
  if (header.rng_state.size() > kMaxRngWords) return make_error(fmt::format("{}: too many RNG words", path));

  const std::string fields = encode_header_fields(header);
  Encoder front;
  front.put_bytes(std::string_view(kMagic, 8));
  front.put<uint32_t>(kVersion);
  front.put<uint32_t>(static_cast<uint32_t>(fields.size()));
  front.put_bytes(fields);
  front.put<uint32_t>(static_cast<uint32_t>(tensors.size()));
  int64_t table_bytes = 0;
  for (const TensorView& t : tensors)
    table_bytes += 4 + static_cast<int64_t>(t.name.size()) + 4 + 8 * static_cast<int64_t>(t.shape.size()) + 8;
  int64_t offset = static_cast<int64_t>(front.bytes().size()) + table_bytes;
  for (const TensorView& t : tensors) {
    front.put<uint32_t>(static_cast<uint32_t>(t.name.size()));
    front.put_bytes(t.name);
    front.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) front.put<int64_t>(d);
    front.put<int64_t>(offset);
    offset += 4 * static_cast<int64_t>(t.data.size());
  }

  WordHash hash;
  detail::AtomicFileWriter out;
  if (Status s = out.open(path); !s) return s;
  hash.update(front.bytes().data(), front.bytes().size());
  if (Status s = out.write(front.bytes().data(), front.bytes().size()); !s) return s;
  for (const TensorView& t : tensors) {
    hash.update(t.data.data(), t.data.size_bytes());
    if (Status s = out.write(t.data.data(), t.data.size_bytes()); !s) return s;
  }
  const uint64_t digest = hash.digest();
  if (Status s = out.write(&digest, sizeof(digest)); !s) return s;
  return out.commit();
}

Result<CheckpointHeader> read_checkpoint_header(const std::string& path) {
  Result<int64_t> size = file_size_of(path);
  if (!size) return size.error();
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return make_error(fmt::format("{}: cannot open checkpoint: {}", path, detail::errno_text(errno)));
  Result<Front> front = read_front(f.get(), path, *size);
  if (!front) return front.error();
  return front->header;
}

Result<CheckpointHeader> load_checkpoint(const std::string& path, std::span<const TensorSlot> slots) {
  Result<int64_t> size = file_size_of(path);
  if (!size) return size.error();
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return make_error(fmt::format("{}: cannot open checkpoint: {}", path, detail::errno_text(errno)));
  Result<Front> front = read_front(f.get(), path, *size);
  if (!front) return front.error();

  // Names and shapes first: nothing is written unless the whole file is what the caller expects.
  std::map<std::string, const TensorSlot*> wanted;
  std::vector<std::string> errors;
  for (const TensorSlot& slot : slots) {
    wanted[slot.name] = &slot;
    if (numel(slot.shape) != static_cast<int64_t>(slot.data.size())) {
      errors.push_back(fmt::format("tensor '{}': this run's buffer has {} elements for shape {}", slot.name,
                                   slot.data.size(), shape_string(slot.shape)));
    }
  }
  std::set<std::string> in_file;
  for (const TableEntry& e : front->table) {
    in_file.insert(e.name);
    auto it = wanted.find(e.name);
    if (it == wanted.end()) {
      errors.push_back(
          fmt::format("tensor '{}' (shape {}) is in the checkpoint but this run has no such tensor", e.name,
                      shape_string(e.shape)));
    } else if (it->second->shape != e.shape) {
      errors.push_back(fmt::format("tensor '{}': checkpoint has shape {}, this run expects {}", e.name,
                                   shape_string(e.shape), shape_string(it->second->shape)));
    }
  }
  for (const TensorSlot& slot : slots) {
    if (!in_file.contains(slot.name)) {
      errors.push_back(fmt::format("tensor '{}' (shape {}) is missing from the checkpoint", slot.name,
                                   shape_string(slot.shape)));
    }
  }
  if (!errors.empty()) {
    std::string message;
    for (const std::string& e : errors)
      message += fmt::format("{}{}: {}", message.empty() ? "" : "\n", path, e);
    return make_error(std::move(message));
  }

  WordHash hash;
  hash.update(front->bytes.data(), front->bytes.size());
  for (const TableEntry& e : front->table) {
    const TensorSlot& slot = *wanted[e.name];
    if (Status s = read_exact(f.get(), slot.data.data(), slot.data.size_bytes(), path, "tensor data"); !s)
      return s.error();
    hash.update(slot.data.data(), slot.data.size_bytes());
  }
  uint64_t stored = 0;
  if (Status s = read_exact(f.get(), &stored, 8, path, "the hash"); !s) return s.error();
  if (stored != hash.digest()) {
    return make_error(fmt::format(
        "{}: checkpoint is corrupt (content hash mismatch); the loaded tensors are garbage", path));
  }
  return front->header;
}

std::string checkpoint_rank_path(const std::string& dir, int rank) {
  return fmt::format("{}/rank_{:05d}.bin", dir, rank);
}

Status check_resume_compatible(const CheckpointHeader& header, const ModelConfig& model,
                               const TrainConfig& train, const ParallelLayout& layout,
                               const RankCoords& rank) {
  std::vector<std::string> diffs;
  auto cmp = [&](const char* what, auto saved, auto now) {
    if (saved != now) diffs.push_back(fmt::format("{}: checkpoint {}, this run {}", what, saved, now));
  };
  const ModelConfig& m = header.model;
  cmp("model.vocab_size", m.vocab_size, model.vocab_size);
  cmp("model.padded_vocab_size", m.padded_vocab_size, model.padded_vocab_size);
  cmp("model.max_seq_len", m.max_seq_len, model.max_seq_len);
  cmp("model.n_layer", m.n_layer, model.n_layer);
  cmp("model.n_head", m.n_head, model.n_head);
  cmp("model.d_model", m.d_model, model.d_model);
  cmp("model.parallel_block", m.parallel_block, model.parallel_block);
  cmp("model.attention_window", m.attention_window, model.attention_window);
  const TrainEssentials now = essentials_of(train);
  const TrainEssentials& t = header.train;
  cmp("train.batch_size", t.batch_size, now.batch_size);
  cmp("train.seq_len", t.seq_len, now.seq_len);
  cmp("train.grad_accum_steps", t.grad_accum_steps, now.grad_accum_steps);
  cmp("train.optimizer", to_string(t.optimizer), to_string(now.optimizer));
  cmp("train.dtype", to_string(t.dtype), to_string(now.dtype));
  cmp("train.seed", t.seed, now.seed);
  cmp("layout", describe(header.layout), describe(layout));
  auto coords = [](const RankCoords& r) { return fmt::format("(tp {}, dp {}, pp {})", r.tp, r.dp, r.pp); };
  cmp("rank", coords(header.rank), coords(rank));
  if (diffs.empty()) return {};
  std::string message = "the checkpoint is from a different run:";
  for (const std::string& d : diffs) message += "\n  " + d;
  return make_error(std::move(message));
}

}  // namespace megascale::trainer
