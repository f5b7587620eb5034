// The trainer's configuration: the GPT model's shape (ModelConfig), the run's hyper-parameters
// (TrainConfig), their exact parameter count, validation, and loading from configs/train/*.yaml.
//
//   Result<RunConfig> run = load_run_config("configs/train/tiny.yaml");
//   if (!run) { fmt::print(stderr, "{}\n", run.error().message); return 2; }
//   int64_t n = run->model.num_parameters();     // exact, tied embedding
//   int D = run->model.head_dim();               // 64 or 128 after validation
//
// File format (every key optional except those marked required; unknown keys are errors; the errors
// read FILE:LINE: key: value: why, like the congestion presets'):
//
//   model:
//     vocab_size: 257            # required: token ids are < vocab_size
//     padded_vocab_size: 320     # wte rows >= vocab_size; absent = vocab_size rounded up to 64 (llm.c)
//     max_seq_len: 256           # required: wpe rows
//     n_layer: 4                 # required
//     n_head: 4                  # required: divides d_model, head_dim = d_model / n_head in {64, 128}
//     d_model: 256               # required
//     parallel_block: false      # y = x + Attn(LN(x)) + MLP(LN(x)) (PaLM, GPT-J; MegaScale §3.1)
//     attention_window: 0        # 0 = full causal; w > 0: query i sees keys j with i - w < j <= i
//   train:
//     batch_size: 16             # B sequences per micro-step
//     seq_len: 256               # T <= model.max_seq_len; absent = model.max_seq_len
//     grad_accum_steps: 1        # micro-steps per optimizer step
//     steps: 1000                # optimizer steps
//     learning_rate: 6.0e-4      # peak, after warmup
//     min_lr_fraction: 0.1       # the cosine ends at min_lr_fraction * learning_rate
//     warmup_steps: 100
//     weight_decay: 0.1          # AdamW decoupled decay (LAMB: inside the update); 2-D weights only
//     beta1: 0.9
//     beta2: 0.95
//     eps: 1.0e-8
//     grad_clip: 1.0             # global-norm clip; 0 = off
//     optimizer: adamw           # adamw | lamb
//     dtype: bf16                # bf16 | fp32: compute copies and activations; masters are always fp32
//     seed: 1337
//     eval_every: 100            # steps between validation passes; 0 = never
//     eval_batches: 20           # validation batches per pass
//     checkpoint_every: 0        # steps between checkpoints; 0 = never
//     checkpoint_dir: ""         # where checkpoints go ("" = no checkpoints)
//     train_data: ""             # glob of llm.c shards, e.g. "data/tiny/*_train_*.bin"; "" = the embedded
//     val_data: ""               #   default dataset (dataset.h), made on first use in data_dir
//     data_dir: "data/synth"     # where the embedded dataset is written
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::trainer {

// The GPT-2 architecture (Radford et al. 2019; pre-LN, GELU MLP of width 4C, learned positions, tied LM
// head), with MegaScale's two options: the parallel block and sliding-window attention (NSDI '24 §3.1).
struct ModelConfig {
  int vocab_size = 0;         // real token ids are in [0, vocab_size)
  int padded_vocab_size = 0;  // rows of wte (and logits); the extra rows are never a target
  int max_seq_len = 0;        // rows of wpe
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;  // C, the residual width
  bool parallel_block = false;
  int attention_window = 0;  // 0 = full causal

  int head_dim() const { return n_head > 0 ? d_model / n_head : 0; }

  // The exact parameter count of the tied-embedding model: wte (padded rows) + wpe + per layer (ln1 w+b,
  // qkv w+b, attention proj w+b, ln2 w+b, fc w+b, fc proj w+b) + final LayerNorm w+b. The parallel block
  // keeps both LayerNorms, as GPT-NeoX's parallel residual does: attention reads LN1(x), the MLP reads
  // LN2(x), so the count does not change.
  int64_t num_parameters() const;

  bool operator==(const ModelConfig&) const = default;
};

// One fp32 parameter tensor of the canonical layout (gpt_parameter_tensors): llm.c's 16 tensors, each
// per-layer tensor stacked over layers as its leading dimension. Linear weights are [out, in].
struct ParameterTensor {
  std::string name;            // "wte", "wpe", "ln1w", "ln1b", "qkvw", ... "lnfw", "lnfb"
  std::vector<int64_t> shape;  // e.g. qkvw: {L, 3C, C}
  int64_t numel() const;
  bool decayed = false;  // true for the 2-D weights (embeddings, matmul weights): weight decay applies
};

// The parameters in order: wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C],
// qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C],
// fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]. Their numels sum to
// num_parameters(). A model may lay memory out differently; checkpoints use these names and shapes.
std::vector<ParameterTensor> gpt_parameter_tensors(const ModelConfig& model);

enum class OptimizerKind { kAdamW, kLamb };
enum class ComputeDtype { kBf16, kFp32 };

std::string_view to_string(OptimizerKind kind);  // "adamw", "lamb"
std::string_view to_string(ComputeDtype dtype);  // "bf16", "fp32"

struct TrainConfig {
  int batch_size = 8;
  int seq_len = 256;
  int grad_accum_steps = 1;
  int steps = 1000;
  double learning_rate = 6e-4;
  double min_lr_fraction = 0.1;
  int warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 = no clipping
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  ComputeDtype dtype = ComputeDtype::kBf16;
  uint64_t seed = 1337;
  int eval_every = 100;  // 0 = never
  int eval_batches = 20;
  int checkpoint_every = 0;  // 0 = never
  std::string checkpoint_dir;
  std::string train_data;  // glob; "" = the embedded dataset in data_dir
  std::string val_data;    // glob; "" = the embedded dataset in data_dir
  std::string data_dir = "data/synth";

  // Tokens per optimizer step: batch_size * seq_len * grad_accum_steps.
  int64_t tokens_per_step() const;

  bool operator==(const TrainConfig&) const = default;
};

// A whole run: what configs/train/*.yaml holds.
struct RunConfig {
  std::string name;  // the file stem ("tiny"), or "inline" for text
  ModelConfig model;
  TrainConfig train;
};

// Checks a model on its own: positive sizes, n_head divides d_model, head_dim in {64, 128} (the
// flash-attention kernel's), vocab_size <= padded_vocab_size <= 65536 (uint16 tokens),
// attention_window >= 0. Every violation is listed, one per line, as "model.key: value: why".
Status validate_model_config(const ModelConfig& model);

// Checks the train section and its relation to the model (seq_len <= max_seq_len, ...), and the model.
Status validate_run_config(const RunConfig& run);

// Parses YAML text; `source` names it in errors ("configs/train/tiny.yaml"). Never throws.
Result<RunConfig> parse_run_config(std::string_view yaml_text, std::string_view source);

// Reads and parses a file; the error names the path when it cannot be read.
Result<RunConfig> load_run_config(const std::string& path);

// A one-line summary for logs: "tiny: L=4 H=4 C=256 D=64 T=256 Vp=320 N=3.29M causal seq-block ...".
std::string describe(const RunConfig& run);

}  // namespace megascale::trainer
