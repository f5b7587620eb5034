// The embedded synthetic dataset (dataset.h).
#include "megascale/trainer/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "megascale/common/splitmix.h"
#include "megascale/trainer/shard.h"
#include "megascale/trainer/tokenizer.h"

namespace megascale::trainer {
namespace {

// Word lists: distinct words, none a prefix of another followed by the same delimiter, so the text decodes
// back to the choices uniquely and the accounted entropy is the text's entropy.
constexpr std::array<std::string_view, 16> kCopyWords = {"cat",  "sun",  "box",  "red",  "lamp", "tiger",
                                                         "blue", "tree", "moon", "fish", "door", "gold",
                                                         "rain", "star", "bird", "salt"};
constexpr std::array<std::string_view, 8> kAdjectives = {"small", "big",   "red",   "old",
                                                         "quiet", "happy", "green", "fast"};
// Singular and plural forms of each noun and verb: agreement is the rule the model has to learn.
constexpr std::array<std::array<std::string_view, 2>, 8> kNouns = {{{"dog", "dogs"},
                                                                    {"cat", "cats"},
                                                                    {"bird", "birds"},
                                                                    {"child", "children"},
                                                                    {"farmer", "farmers"},
                                                                    {"robot", "robots"},
                                                                    {"fox", "foxes"},
                                                                    {"teacher", "teachers"}}};
constexpr std::array<std::array<std::string_view, 2>, 8> kVerbs = {{{"sees", "see"},
                                                                    {"likes", "like"},
                                                                    {"finds", "find"},
                                                                    {"follows", "follow"},
                                                                    {"watches", "watch"},
                                                                    {"helps", "help"},
                                                                    {"carries", "carry"},
                                                                    {"chases", "chase"}}};
constexpr std::array<std::string_view, 6> kObjects = {"ball", "apple", "book", "stone", "hat", "cup"};

constexpr uint64_t kValStreamSalt = 0x76616c5f73747265ULL;  // "val_stre": val text is another stream
constexpr int kManifestVersion = 1;
constexpr std::string_view kManifestName = "synth_manifest.txt";

}  // namespace

SyntheticTextGenerator::SyntheticTextGenerator(uint64_t seed) : state_(seed) {}

uint64_t SyntheticTextGenerator::pick(uint64_t options) {
  choice_entropy_nats_ += std::log(static_cast<double>(options));
  // A uniform double in [0, 1) scaled down: bias below 2^-45 for these small ranges, and the same on every
  // platform (unlike <random>'s distributions).
  return static_cast<uint64_t>(unit_interval(splitmix64_next(state_)) * static_cast<double>(options));
}

std::string SyntheticTextGenerator::arithmetic_line() {
  switch (pick(3)) {
    case 0: {
      uint64_t a = pick(100), b = pick(100);
      return fmt::format("{} + {} = {}.", a, b, a + b);
    }
    case 1: {
      uint64_t a = pick(100), b = pick(a + 1);  // b <= a: no negative answers
      return fmt::format("{} - {} = {}.", a, b, a - b);
    }
    default: {
      uint64_t a = pick(13), b = pick(13);  // the times table up to 12
      return fmt::format("{} * {} = {}.", a, b, a * b);
    }
  }
}

std::string SyntheticTextGenerator::copy_line(bool reverse) {
  const uint64_t n = 2 + pick(4);  // 2..5 words
  std::vector<std::string_view> words;
  for (uint64_t i = 0; i < n; ++i) words.push_back(kCopyWords[pick(kCopyWords.size())]);
  auto joined = [](const std::vector<std::string_view>& w) {
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) s += fmt::format("{}{}", i == 0 ? "" : " ", w[i]);
    return s;
  };
  std::string prompt = joined(words);
  if (reverse) std::reverse(words.begin(), words.end());
  return fmt::format("{}: {}. -> {}.", reverse ? "reverse" : "copy", prompt, joined(words));
}

std::string SyntheticTextGenerator::sentence_line() {
  const size_t plural = pick(2);
  std::string_view adjective = kAdjectives[pick(kAdjectives.size())];
  std::string_view noun = kNouns[pick(kNouns.size())][plural];
  std::string_view verb = kVerbs[pick(kVerbs.size())][plural];
  std::string_view object_adjective = kAdjectives[pick(kAdjectives.size())];
  std::string_view object = kObjects[pick(kObjects.size())];
  return fmt::format("the {} {} {} the {} {}.", adjective, noun, verb, object_adjective, object);
}

std::string SyntheticTextGenerator::counting_line() {
  const uint64_t start = pick(90);
  const uint64_t n = 3 + pick(5);  // 3..7 numbers
  std::string s = "count:";
  for (uint64_t i = 0; i < n; ++i) s += fmt::format(" {}", start + i);
  return s + ".";
}

std::string SyntheticTextGenerator::next_document() {
  std::string doc;
  const uint64_t lines = 3 + pick(6);  // 3..8 lines
  for (uint64_t i = 0; i < lines; ++i) {
    switch (pick(5)) {
      case 0:
        doc += arithmetic_line();
        break;
      case 1:
        doc += copy_line(false);
        break;
      case 2:
        doc += copy_line(true);
        break;
      case 3:
        doc += sentence_line();
        break;
      default:
        doc += counting_line();
        break;
    }
    doc += '\n';
  }
  bytes_emitted_ += static_cast<int64_t>(doc.size());
  return doc;
}

namespace {

struct StreamResult {
  std::vector<std::string> paths;
  int64_t tokens = 0;
  double entropy_nats = 0;
};

// Documents from `seed` until `target_tokens`, split into shards at document boundaries.
Result<StreamResult> write_stream(const std::filesystem::path& dir, const std::string& split, int first_index,
                                  uint64_t seed, int64_t target_tokens, int64_t tokens_per_shard) {
  SyntheticTextGenerator gen(seed);
  StreamResult result;
  std::vector<uint16_t> shard;
  int index = first_index;
  auto flush = [&]() -> Status {
    const std::string path = (dir / fmt::format("synth_{}_{:06d}.bin", split, index++)).string();
    if (Status s = write_shard(path, shard); !s) return s;
    result.paths.push_back(path);
    shard.clear();
    return {};
  };
  while (result.tokens < target_tokens) {
    std::vector<uint16_t> doc = byte_encode(gen.next_document());
    doc.push_back(kByteEotToken);
    // A new shard only while at least half a shard is still to come: the last shard then holds between
    // 0.5 and 1.5 shards' worth, never a stub too short for a loader's step (loader.h refuses those).
    const bool full = static_cast<int64_t>(shard.size() + doc.size()) > tokens_per_shard;
    if (!shard.empty() && full && target_tokens - result.tokens >= tokens_per_shard / 2) {
      if (Status s = flush(); !s) return s.error();
    }
    shard.insert(shard.end(), doc.begin(), doc.end());
    result.tokens += static_cast<int64_t>(doc.size());
  }
  if (!shard.empty()) {
    if (Status s = flush(); !s) return s.error();
  }
  result.entropy_nats = gen.choice_entropy_nats();
  return result;
}

std::string manifest_text(const DatasetOptions& o) {
  return fmt::format("version={}\nseed={}\ntrain_tokens={}\nval_tokens={}\ntokens_per_shard={}\n",
                     kManifestVersion, o.seed, o.train_tokens, o.val_tokens, o.tokens_per_shard);
}

}  // namespace

Result<DatasetFiles> write_synthetic_dataset(const std::string& dir, const DatasetOptions& options) {
  if (options.train_tokens < 1 || options.val_tokens < 1 || options.tokens_per_shard < 1) {
    return make_error(
        fmt::format("synthetic dataset: train_tokens ({}), val_tokens ({}) and tokens_per_shard ({}) "
                    "must be >= 1",
                    options.train_tokens, options.val_tokens, options.tokens_per_shard));
  }
  const std::filesystem::path root(dir);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return make_error(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));
  // Shards of an older dataset would match the globs too: remove them first.
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("synth_") && (name.ends_with(".bin") || name == kManifestName)) {
      std::filesystem::remove(entry.path(), ec);
    }
  }

  Result<StreamResult> val = write_stream(root, "val", 0, splitmix64_mix(options.seed ^ kValStreamSalt),
                                          options.val_tokens, options.val_tokens + (1 << 20));
  if (!val) return val.error();
  Result<StreamResult> train =
      write_stream(root, "train", 1, options.seed, options.train_tokens, options.tokens_per_shard);
  if (!train) return train.error();

  DatasetFiles files;
  files.train_glob = (root / "synth_train_*.bin").string();
  files.val_glob = (root / "synth_val_*.bin").string();
  files.paths = val->paths;
  files.paths.insert(files.paths.end(), train->paths.begin(), train->paths.end());
  files.train_tokens = train->tokens;
  files.val_tokens = val->tokens;
  files.train_choice_entropy_nats_per_token = train->entropy_nats / static_cast<double>(train->tokens);

  // The manifest last: its presence means every shard before it was written whole.
  std::ofstream manifest(root / kManifestName);
  manifest << manifest_text(options)
           << fmt::format("entropy_nats_per_token={:.17g}\n", files.train_choice_entropy_nats_per_token);
  for (const std::string& p : files.paths)
    manifest << "shard=" << std::filesystem::path(p).filename().string() << "\n";
  manifest.close();
  if (!manifest) return make_error(fmt::format("{}: cannot write {}", dir, kManifestName));
  return files;
}

Result<DatasetFiles> ensure_synthetic_dataset(const std::string& dir, const DatasetOptions& options) {
  const std::filesystem::path root(dir);
  std::ifstream in(root / kManifestName);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    const std::string manifest = text.str();
    const std::string expected = manifest_text(options);
    if (manifest.starts_with(expected)) {
      DatasetFiles files;
      files.train_glob = (root / "synth_train_*.bin").string();
      files.val_glob = (root / "synth_val_*.bin").string();
      bool whole = true;
      std::istringstream lines(manifest.substr(expected.size()));
      for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("entropy_nats_per_token=")) {
          files.train_choice_entropy_nats_per_token = std::stod(line.substr(line.find('=') + 1));
        } else if (line.starts_with("shard=")) {
          const std::string path = (root / line.substr(6)).string();
          Result<ShardInfo> info = read_shard_header(path);
          if (!info) {
            whole = false;
            break;
          }
          files.paths.push_back(path);
          (line.starts_with("shard=synth_val_") ? files.val_tokens : files.train_tokens) += info->num_tokens;
        }
      }
      if (whole && files.train_tokens >= options.train_tokens && files.val_tokens >= options.val_tokens)
        return files;
    }
  }
  return write_synthetic_dataset(dir, options);
}

}  // namespace megascale::trainer
