// ModelConfig/TrainConfig: parameter count, validation, YAML loading. yaml-cpp reports errors by throwing;
// every throw is caught here and returned as an Error. Messages follow the congestion presets' style
// (congestion/src/config.cpp): SOURCE:LINE: key.path: value: why, all problems listed in file order.
#include "megascale/trainer/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include "megascale/common/yaml_text.h"

namespace megascale::trainer {

int64_t ParameterTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterTensor> gpt_parameter_tensors(const ModelConfig& m) {
  const int64_t L = m.n_layer, C = m.d_model, Vp = m.padded_vocab_size, maxT = m.max_seq_len;
  return {
      {"wte", {Vp, C}, true},
      {"wpe", {maxT, C}, true},
      {"ln1w", {L, C}, false},
      {"ln1b", {L, C}, false},
      {"qkvw", {L, 3 * C, C}, true},
      {"qkvb", {L, 3 * C}, false},
      {"attprojw", {L, C, C}, true},
      {"attprojb", {L, C}, false},
      {"ln2w", {L, C}, false},
      {"ln2b", {L, C}, false},
      {"fcw", {L, 4 * C, C}, true},
      {"fcb", {L, 4 * C}, false},
      {"fcprojw", {L, C, 4 * C}, true},
      {"fcprojb", {L, C}, false},
      {"lnfw", {C}, false},
      {"lnfb", {C}, false},
  };
}

int64_t ModelConfig::num_parameters() const {
  int64_t n = 0;
  for (const ParameterTensor& t : gpt_parameter_tensors(*this)) n += t.numel();
  return n;
}

int64_t TrainConfig::tokens_per_step() const {
  return int64_t{batch_size} * seq_len * grad_accum_steps;
}

std::string_view to_string(OptimizerKind kind) {
  return kind == OptimizerKind::kLamb ? "lamb" : "adamw";
}

std::string_view to_string(ComputeDtype dtype) {
  return dtype == ComputeDtype::kFp32 ? "fp32" : "bf16";
}

namespace {

using yaml::at_line;
using yaml::in_file_order;
using yaml::is_plain_scalar;
using yaml::line_of;
using yaml::node_kind;
using yaml::ParseError;
using yaml::printable;

// One problem: the key path it is about ("model.n_head"), the value as written, and why it is wrong.
struct Violation {
  std::string key;
  std::string value;
  std::string why;
};

// The FlashAttention-style kernel is written for these head sizes only (trainer-design.md).
constexpr int kSupportedHeadDims[] = {64, 128};
constexpr int kMaxVocab = 65536;  // shards hold uint16 tokens

std::vector<Violation> model_violations(const ModelConfig& m) {
  std::vector<Violation> v;
  auto positive = [&](const char* key, int value) {
    if (value < 1) v.push_back({fmt::format("model.{}", key), std::to_string(value), "must be >= 1"});
  };
  positive("vocab_size", m.vocab_size);
  positive("max_seq_len", m.max_seq_len);
  positive("n_layer", m.n_layer);
  positive("n_head", m.n_head);
  positive("d_model", m.d_model);
  if (m.vocab_size > kMaxVocab) {
    v.push_back({"model.vocab_size", std::to_string(m.vocab_size),
                 fmt::format("must be <= {}: shards hold uint16 token ids", kMaxVocab)});
  }
  if (m.padded_vocab_size < m.vocab_size) {
    v.push_back({"model.padded_vocab_size", std::to_string(m.padded_vocab_size),
                 fmt::format("must be >= model.vocab_size ({})", m.vocab_size)});
  }
  if (m.n_head >= 1 && m.d_model >= 1) {
    if (m.d_model % m.n_head != 0) {
      v.push_back({"model.n_head", std::to_string(m.n_head),
                   fmt::format("must divide model.d_model ({}): heads split the width evenly", m.d_model)});
    } else if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), m.head_dim()) ==
               std::end(kSupportedHeadDims)) {
      v.push_back({"model.n_head", std::to_string(m.n_head),
                   fmt::format("gives head_dim = d_model / n_head = {} / {} = {}; the attention kernel "
                               "supports head_dim 64 or 128",
                               m.d_model, m.n_head, m.head_dim())});
    }
  }
  if (m.attention_window < 0) {
    v.push_back({"model.attention_window", std::to_string(m.attention_window),
                 "must be >= 0 (0 = full causal attention)"});
  }
  return v;
}

std::vector<Violation> train_violations(const TrainConfig& t, const ModelConfig& m) {
  std::vector<Violation> v;
  auto at_least = [&](const char* key, int64_t value, int64_t min) {
    if (value < min)
      v.push_back({fmt::format("train.{}", key), std::to_string(value), fmt::format("must be >= {}", min)});
  };
  at_least("batch_size", t.batch_size, 1);
  at_least("seq_len", t.seq_len, 1);
  at_least("grad_accum_steps", t.grad_accum_steps, 1);
  at_least("steps", t.steps, 1);
  at_least("warmup_steps", t.warmup_steps, 0);
  at_least("eval_every", t.eval_every, 0);
  at_least("eval_batches", t.eval_batches, 1);
  at_least("checkpoint_every", t.checkpoint_every, 0);
  if (m.max_seq_len >= 1 && t.seq_len > m.max_seq_len) {
    v.push_back({"train.seq_len", std::to_string(t.seq_len),
                 fmt::format("must be <= model.max_seq_len ({}): wpe has that many rows", m.max_seq_len)});
  }
  if (t.steps >= 1 && t.warmup_steps > t.steps) {
    v.push_back({"train.warmup_steps", std::to_string(t.warmup_steps),
                 fmt::format("must be <= train.steps ({})", t.steps)});
  }
  auto real = [&](const char* key, double value, bool ok, const char* rule) {
    if (!std::isfinite(value) || !ok)
      v.push_back({fmt::format("train.{}", key), fmt::format("{}", value), rule});
  };
  real("learning_rate", t.learning_rate, t.learning_rate > 0, "must be > 0");
  real("min_lr_fraction", t.min_lr_fraction, t.min_lr_fraction >= 0 && t.min_lr_fraction <= 1,
       "must be in [0, 1]");
  real("weight_decay", t.weight_decay, t.weight_decay >= 0, "must be >= 0");
  real("beta1", t.beta1, t.beta1 >= 0 && t.beta1 < 1, "must be in [0, 1)");
  real("beta2", t.beta2, t.beta2 >= 0 && t.beta2 < 1, "must be in [0, 1)");
  real("eps", t.eps, t.eps > 0, "must be > 0");
  real("grad_clip", t.grad_clip, t.grad_clip >= 0, "must be >= 0 (0 = no clipping)");
  if (t.checkpoint_every > 0 && t.checkpoint_dir.empty()) {
    v.push_back({"train.checkpoint_every", std::to_string(t.checkpoint_every),
                 "needs train.checkpoint_dir (where checkpoints go)"});
  }
  int64_t tokens = int64_t{t.batch_size} * t.seq_len;
  if (tokens > std::numeric_limits<int32_t>::max()) {
    v.push_back({"train.batch_size", std::to_string(t.batch_size),
                 fmt::format("batch_size * seq_len = {} tokens does not fit int32 indexing", tokens)});
  }
  return v;
}

std::string join_violations(const std::vector<Violation>& v) {
  std::string out;
  for (const Violation& x : v) {
    if (!out.empty()) out += '\n';
    out += fmt::format("{}: {}: {}", x.key, x.value, x.why);
  }
  return out;
}

// ---- YAML ---------------------------------------------------------------------------------------------

// What the user wrote, for messages: fast, "25" (a quoted string), a mapping.
std::string shown(const YAML::Node& node) {
  if (!node.IsScalar()) return std::string(node_kind(node));
  if (is_plain_scalar(node)) return printable(node.Scalar());
  return fmt::format("\"{}\"", printable(node.Scalar()));
}

// Reads one mapping: typed fields by key, records each key's line, reports unknown keys.
class SectionReader {
 public:
  SectionReader(std::string prefix, const YAML::Node& map, std::vector<ParseError>& errors,
                std::map<std::string, int>& lines)
      : prefix_(std::move(prefix)), errors_(errors), lines_(lines) {
    for (const auto& pair : map) {
      const YAML::Node key = pair.first;
      if (!key.IsScalar()) {
        errors_.push_back(
            {line_of(key), fmt::format("{}: keys must be plain names, got {}", prefix_, shown(key))});
        continue;
      }
      // A repeated key is reported by yaml::duplicate_keys over the whole document; the first counts.
      if (!seen_.insert(key.Scalar()).second) continue;
      entries_.push_back({key.Scalar(), line_of(key), pair.second});
    }
  }

  // Unknown keys, listing the valid ones. Call after every field was read.
  void finish() {
    for (const Entry& e : entries_) {
      if (std::find(known_.begin(), known_.end(), e.key) != known_.end()) continue;
      std::string valid;
      for (std::string_view k : known_) valid += fmt::format("{}{}", valid.empty() ? "" : ", ", k);
      errors_.push_back({e.line, fmt::format("{}.{}: unknown key; valid keys in '{}': {}", prefix_,
                                             printable(e.key), prefix_, valid)});
    }
  }

  bool has(std::string_view key) const {
    return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  }

  template <class Int>
  void integer(std::string_view key, Int& value) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    const std::string& text = node->Scalar();
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    Int parsed{};
    auto [end, ec] = std::from_chars(first, last, parsed);
    if (!is_plain_scalar(*node) || ec == std::errc::invalid_argument || end != last) {
      error(*node, key, "expected a whole number");
    } else if (ec == std::errc::result_out_of_range) {
      error(*node, key,
            fmt::format("out of range [{}, {}]", std::numeric_limits<Int>::min(),
                        std::numeric_limits<Int>::max()));
    } else {
      value = parsed;
    }
  }

  void real(std::string_view key, double& value) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    const std::string& text = node->Scalar();
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    double parsed = 0;
    auto [end, ec] = std::from_chars(first, last, parsed, std::chars_format::general);
    if (!is_plain_scalar(*node) || ec != std::errc() || end != last || !std::isfinite(parsed)) {
      error(*node, key, "expected a finite number");
    } else {
      value = parsed;
    }
  }

  void boolean(std::string_view key, bool& value) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    if (!is_plain_scalar(*node) || !YAML::convert<bool>::decode(*node, value)) {
      error(*node, key, "expected true or false");
    }
  }

  void text(std::string_view key, std::string& value) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    if (node->IsNull()) {
      value.clear();
    } else if (!node->IsScalar()) {
      error(*node, key, "expected text");
    } else {
      value = node->Scalar();
    }
  }

  // A name from `choices` (in the order of `values`).
  template <class E, size_t N>
  void choice(std::string_view key, E& value, const std::string_view (&names)[N], const E (&values)[N]) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    if (node->IsScalar()) {
      for (size_t i = 0; i < N; ++i) {
        if (node->Scalar() == names[i]) {
          value = values[i];
          return;
        }
      }
    }
    std::string list;
    for (std::string_view n : names) list += fmt::format("{}{}", list.empty() ? "" : ", ", n);
    error(*node, key, fmt::format("expected one of: {}", list));
  }

 private:
  struct Entry {
    std::string key;
    int line;
    YAML::Node value;
  };

  const YAML::Node* lookup(std::string_view key) {
    known_.push_back(key);
    for (const Entry& e : entries_) {
      if (e.key == key) {
        lines_[fmt::format("{}.{}", prefix_, key)] = line_of(e.value);
        return &e.value;
      }
    }
    return nullptr;
  }

  void error(const YAML::Node& node, std::string_view key, std::string why) {
    errors_.push_back({line_of(node), fmt::format("{}.{}: {}: {}", prefix_, key, shown(node), why)});
  }

  std::string prefix_;
  std::vector<ParseError>& errors_;
  std::map<std::string, int>& lines_;
  std::vector<Entry> entries_;
  std::unordered_set<std::string> seen_;  // the keys in entries_
  std::vector<std::string_view> known_;
};

void read_model(SectionReader& r, ModelConfig& m) {
  r.integer("vocab_size", m.vocab_size);
  r.integer("padded_vocab_size", m.padded_vocab_size);
  r.integer("max_seq_len", m.max_seq_len);
  r.integer("n_layer", m.n_layer);
  r.integer("n_head", m.n_head);
  r.integer("d_model", m.d_model);
  r.boolean("parallel_block", m.parallel_block);
  r.integer("attention_window", m.attention_window);
}

void read_train(SectionReader& r, TrainConfig& t) {
  static constexpr std::string_view kOptimizerNames[] = {"adamw", "lamb"};
  static constexpr OptimizerKind kOptimizers[] = {OptimizerKind::kAdamW, OptimizerKind::kLamb};
  static constexpr std::string_view kDtypeNames[] = {"bf16", "fp32"};
  static constexpr ComputeDtype kDtypes[] = {ComputeDtype::kBf16, ComputeDtype::kFp32};
  r.integer("batch_size", t.batch_size);
  r.integer("seq_len", t.seq_len);
  r.integer("grad_accum_steps", t.grad_accum_steps);
  r.integer("steps", t.steps);
  r.real("learning_rate", t.learning_rate);
  r.real("min_lr_fraction", t.min_lr_fraction);
  r.integer("warmup_steps", t.warmup_steps);
  r.real("weight_decay", t.weight_decay);
  r.real("beta1", t.beta1);
  r.real("beta2", t.beta2);
  r.real("eps", t.eps);
  r.real("grad_clip", t.grad_clip);
  r.choice("optimizer", t.optimizer, kOptimizerNames, kOptimizers);
  r.choice("dtype", t.dtype, kDtypeNames, kDtypes);
  r.integer("seed", t.seed);
  r.integer("eval_every", t.eval_every);
  r.integer("eval_batches", t.eval_batches);
  r.integer("checkpoint_every", t.checkpoint_every);
  r.text("checkpoint_dir", t.checkpoint_dir);
  r.text("train_data", t.train_data);
  r.text("val_data", t.val_data);
  r.text("data_dir", t.data_dir);
}

std::string stem_of(std::string_view source) {
  std::string stem = std::filesystem::path(std::string(source)).stem().string();
  return stem.empty() ? std::string("inline") : stem;
}

Result<RunConfig> parse_document(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return make_error(
        fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (root.IsNull())
    return make_error(fmt::format("{}: empty config; it needs 'model:' and 'train:' sections", source));
  if (!root.IsMap()) {
    return make_error(fmt::format("{}: expected a mapping with 'model:' and 'train:', got {}",
                                  at_line(source, line_of(root)), shown(root)));
  }

  RunConfig run;
  run.name = stem_of(source);
  std::vector<ParseError> errors = yaml::duplicate_keys(root);  // the first of a repeated key counts
  std::map<std::string, int> lines;
  std::unordered_set<std::string> seen;
  bool have_model = false;
  for (const auto& pair : root) {
    const YAML::Node key = pair.first;
    const YAML::Node value = pair.second;
    const std::string name = key.IsScalar() ? key.Scalar() : std::string();
    if (key.IsScalar() && !seen.insert(name).second) continue;
    if (name == "description") {
      if (!value.IsScalar() && !value.IsNull()) {
        errors.push_back({line_of(value), fmt::format("description: {}: expected text", shown(value))});
      }
      continue;
    }
    if (name != "model" && name != "train") {
      errors.push_back(
          {line_of(key), fmt::format("{}: unknown key; valid keys at the top level: model, train, "
                                     "description",
                                     key.IsScalar() ? printable(name) : shown(key))});
      continue;
    }
    if (!value.IsMap()) {
      errors.push_back(
          {line_of(value), fmt::format("{}: {}: expected a mapping of keys", name, shown(value))});
      continue;
    }
    SectionReader reader(name, value, errors, lines);
    if (name == "model") {
      have_model = true;
      read_model(reader, run.model);
      for (const char* required : {"vocab_size", "max_seq_len", "n_layer", "n_head", "d_model"}) {
        if (!reader.has(required)) {
          errors.push_back({line_of(key), fmt::format("model.{}: missing (required)", required)});
        }
      }
      // llm.c pads the vocabulary to a multiple of 64 (50257 -> 50304) so the LM-head matmul is aligned.
      if (!reader.has("padded_vocab_size") && run.model.vocab_size > 0) {
        run.model.padded_vocab_size = (run.model.vocab_size + 63) / 64 * 64;
      }
    } else {
      read_train(reader, run.train);
    }
    reader.finish();
  }
  if (!have_model) errors.push_back({0, "model: missing section (required)"});
  // Without train.seq_len the run trains at the model's full context.
  if (!lines.contains("train.seq_len")) run.train.seq_len = run.model.max_seq_len;

  // Ranges and relations only once every key was understood.
  if (errors.empty()) {
    std::vector<Violation> v = model_violations(run.model);
    std::vector<Violation> t = train_violations(run.train, run.model);
    v.insert(v.end(), t.begin(), t.end());
    for (const Violation& x : v) {
      auto it = lines.find(x.key);
      errors.push_back(
          {it == lines.end() ? 0 : it->second, fmt::format("{}: {}: {}", x.key, x.value, x.why)});
    }
  }
  if (errors.empty()) return run;
  // File order; errors without a line (a missing section) go last.
  return make_error(in_file_order(std::move(errors), source));
}

}  // namespace

Status validate_model_config(const ModelConfig& model) {
  std::vector<Violation> v = model_violations(model);
  if (v.empty()) return {};
  return make_error(join_violations(v));
}

Status validate_run_config(const RunConfig& run) {
  std::vector<Violation> v = model_violations(run.model);
  std::vector<Violation> t = train_violations(run.train, run.model);
  v.insert(v.end(), t.begin(), t.end());
  if (v.empty()) return {};
  return make_error(join_violations(v));
}

Result<RunConfig> parse_run_config(std::string_view yaml_text, std::string_view source) {
  try {
    return parse_document(yaml_text, source);
  } catch (const YAML::Exception& e) {  // yaml-cpp may throw while walking a malformed tree
    return make_error(fmt::format("{}:{}: YAML error: {}", source, e.mark.line + 1, e.msg));
  }
}

Result<RunConfig> load_run_config(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return make_error(fmt::format("{}: file not found", path));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return make_error(fmt::format("{}: cannot read the file", path));
  return parse_run_config(text.str(), path);
}

std::string describe(const RunConfig& run) {
  const ModelConfig& m = run.model;
  const TrainConfig& t = run.train;
  return fmt::format(
      "{}: L={} H={} C={} D={} Vp={} N={:.2f}M {} {} | B={} T={} accum={} ({} tok/step) steps={} lr={:.2e} "
      "warmup={} {} {}",
      run.name, m.n_layer, m.n_head, m.d_model, m.head_dim(), m.padded_vocab_size,
      static_cast<double>(m.num_parameters()) / 1e6,
      m.attention_window > 0 ? fmt::format("window={}", m.attention_window) : std::string("causal"),
      m.parallel_block ? "parallel-block" : "sequential-block", t.batch_size, t.seq_len, t.grad_accum_steps,
      t.tokens_per_step(), t.steps, t.learning_rate, t.warmup_steps, to_string(t.optimizer),
      to_string(t.dtype));
}

}  // namespace megascale::trainer
