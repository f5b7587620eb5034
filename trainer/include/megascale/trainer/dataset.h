// The embedded default dataset: a seeded generator of text with real, learnable structure, written as
// byte-level llm.c shards (tokenizer.h, shard.h), so the README's main job trains with no download.
//
//   DatasetOptions options;                           // seed 42, 8 M train tokens, 128 k val tokens
//   Result<DatasetFiles> files = write_synthetic_dataset("data/synth", options);
//   // files->train_glob = "data/synth/synth_train_*.bin", files->val_glob = "data/synth/synth_val_*.bin"
//
// Each document (separated by EOT) is a few lines, each line one task drawn at random:
//   - arithmetic facts:    "17 + 25 = 42."  "63 - 8 = 55."  "7 * 6 = 42."   (the answer is determined)
//   - copy:                "copy: tiger lamp red. -> tiger lamp red."
//   - reverse:             "reverse: cat sun box. -> box sun cat."
//   - grammar sentences:   "the small dog sees a red ball." (subject-verb agreement: "the dogs see")
//   - counting:            "count: 4 5 6 7 8."
// After the prompt part of copy/reverse/arithmetic/counting, everything is a function of what came
// before, so a model that learns the rules predicts those bytes exactly; the only uncertainty is in the
// random choices. The generator accounts the entropy of its choices (sum of log(number of options) of
// each uniform choice), so the loss a perfect model reaches is known: choice_entropy_nats /
// tokens emitted. For the default mix that is 0.35 nats per token (seed 42, 500k tokens; dataset_test
// prints it), against 3.26 nats for the unigram distribution of the same text: a loss well below 3.26
// shows the model learns structure, not letter frequencies. 0.35 is a floor a real model approaches but
// does not reach: it needs exact two-digit arithmetic and a context that holds the whole line (lines are
// at most 69 bytes, documents 181 bytes on average and at most 406, so T = 256 mostly does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::trainer {

class SyntheticTextGenerator {
 public:
  explicit SyntheticTextGenerator(uint64_t seed);

  // One document: several task lines, ending in '\n' (no EOT; the writer adds it).
  std::string next_document();

  // Sum over every random choice so far of log(options) in nats (uniform choices): the information the
  // generated text carries beyond its rules.
  double choice_entropy_nats() const { return choice_entropy_nats_; }
  int64_t bytes_emitted() const { return bytes_emitted_; }

 private:
  uint64_t pick(uint64_t options);  // uniform in [0, options), accounted
  std::string arithmetic_line();
  std::string copy_line(bool reverse);
  std::string sentence_line();
  std::string counting_line();

  uint64_t state_;
  double choice_entropy_nats_ = 0;
  int64_t bytes_emitted_ = 0;
};

struct DatasetOptions {
  uint64_t seed = 42;
  int64_t train_tokens = 8'000'000;  // at least; documents are whole
  int64_t val_tokens = 131'072;
  int64_t tokens_per_shard = 1'000'000;  // split at document boundaries; the last holds 0.5x to 1.5x
};

struct DatasetFiles {
  std::string train_glob;
  std::string val_glob;
  std::vector<std::string> paths;  // every shard written, val first
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  double train_choice_entropy_nats_per_token = 0;  // what a perfect model's train loss would be
};

// Writes <dir>/synth_val_000000.bin and <dir>/synth_train_000001.bin, ... (llm.c's naming: shard 0 is
// val). The val text comes from a different stream of the same seed, so it is not a copy of train. Same
// seed and options: byte-identical files. Creates `dir` if needed.
Result<DatasetFiles> write_synthetic_dataset(const std::string& dir, const DatasetOptions& options);

// The files written before for these options when they are all present with the right token counts
// (checked through the headers), else writes them: what the trainer calls at start.
Result<DatasetFiles> ensure_synthetic_dataset(const std::string& dir, const DatasetOptions& options);

}  // namespace megascale::trainer
