// megascale-train: trains the GPT of a configs/train/*.yaml, printing llm.c-like step lines with MFU,
// with checkpoints that resume bit-exactly, and a step-0 dump for the PyTorch reference
// (tools/trainer_reference.py). One process is one rank: alone, or one of a job that a launcher started
// (torchrun, Open MPI, Slurm, or --nproc N here): tensor parallel with sequence parallel, pipeline
// parallel (1F1B, interleaved), and data parallel with a sharded optimizer, over NCCL.
//
//   megascale-train --config configs/train/tiny.yaml                  # makes the embedded dataset
//   megascale-train --config configs/train/tiny.yaml --nproc 2 --dp 2 # two ranks forked on this host
//   megascale-train --config configs/train/tiny.yaml --nproc 4 --tp 2 # tp 2 x dp 2
//   megascale-train --config configs/train/tiny.yaml --nproc 8 --tp 2 --pp 2 --grad-accum 4
//   megascale-train --config configs/train/tiny.yaml --steps 100 --checkpoint-dir ck --checkpoint-every 50
//   megascale-train --config configs/train/tiny.yaml --resume ck/ckpt_00000050.bin
//   megascale-train --config configs/train/tiny.yaml --nproc 4 --tp 2 --resume ck/ckpt_00000050  # a job's
//   megascale-train --config configs/train/tiny.yaml --dtype fp32 --dump-step0 dump/
#include <cuda_runtime.h>
#include <fmt/core.h>
#include <fmt/os.h>
#include <nccl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attention.cuh"
#include "megascale/common/launch.h"
#include "megascale/trainer/checkpoint.h"
#include "megascale/trainer/comm_volume.h"
#include "megascale/trainer/config.h"
#include "megascale/trainer/dataset.h"
#include "megascale/trainer/loader.h"
#include "megascale/trainer/mfu.h"
#include "megascale/trainer/parallel.h"
#include "megascale/trainer/schedule.h"
#include "megascale/trainer/watchdog.h"
#include "model.h"
#include "stage_profiler.h"

namespace megascale::trainer {
namespace {

struct Options {
  std::string config_path;
  std::optional<int> steps, batch_size, seq_len, grad_accum, window, eval_every, checkpoint_every;
  std::optional<std::string> dtype, optimizer, checkpoint_dir, train_data, val_data;
  std::optional<uint64_t> seed;
  bool parallel_block = false;
  std::string resume_path;
  std::string dump_step0_dir;
  std::string loss_log_path;
  int stop_after = 0;           // 0 = run to the end
  double step_timeout_s = 600;  // a step running longer ends the job (watchdog.h); 0 = no deadline
  // How this process's host thread waits for the GPU: "auto" blocks (sleeps) when ranks share the host,
  // leaving the CPUs to NCCL's and the net's threads, and is CUDA's own choice otherwise; "spin",
  // "yield", "block" force one.
  std::string cuda_wait = "auto";
  bool profile = false;         // --profile or MEGASCALE_TRAIN_PROFILE=1
  std::string timeline_dir;     // --timeline: a Chrome trace per rank here (turns the profile on)
  int timeline_steps = 3;
  bool comm_volume = false;  // print the layout's bytes per step by group and exit
  int nproc = 1;             // > 1: fork this many ranks here (unless a launcher already set RANK)
  int tp = 1, pp = 1, vpp = 1;
  std::optional<int> dp;    // absent: world size / (tp * pp)
  bool dp_overlap = false;  // data-parallel reduce-scatter and all-gather on their own stream (model.h)
  bool pp_coupled = false;  // the pipeline's exchanges on the compute stream (model.h: the baseline)
  bool tp_overlap = false;  // tensor-parallel GEMMs in blocks pipelined with their collectives (model.h)
  std::vector<std::string> argv;  // this process's own arguments, for the ranks --nproc starts
};

Status apply_overrides(const Options& o, RunConfig& run) {
  if (o.steps) run.train.steps = *o.steps;
  if (o.batch_size) run.train.batch_size = *o.batch_size;
  if (o.seq_len) run.train.seq_len = *o.seq_len;
  if (o.grad_accum) run.train.grad_accum_steps = *o.grad_accum;
  if (o.window) run.model.attention_window = *o.window;
  if (o.eval_every) run.train.eval_every = *o.eval_every;
  if (o.checkpoint_every) run.train.checkpoint_every = *o.checkpoint_every;
  if (o.checkpoint_dir) run.train.checkpoint_dir = *o.checkpoint_dir;
  if (o.train_data) run.train.train_data = *o.train_data;
  if (o.val_data) run.train.val_data = *o.val_data;
  if (o.seed) run.train.seed = *o.seed;
  if (o.parallel_block) run.model.parallel_block = true;
  if (o.dtype) {
    if (*o.dtype == "bf16") {
      run.train.dtype = ComputeDtype::kBf16;
    } else if (*o.dtype == "fp32") {
      run.train.dtype = ComputeDtype::kFp32;
    } else {
      return Error{"--dtype: '" + *o.dtype + "': expected bf16 or fp32"};
    }
  }
  if (o.optimizer) {
    if (*o.optimizer == "adamw") {
      run.train.optimizer = OptimizerKind::kAdamW;
    } else if (*o.optimizer == "lamb") {
      run.train.optimizer = OptimizerKind::kLamb;
    } else {
      return Error{"--optimizer: '" + *o.optimizer + "': expected adamw or lamb"};
    }
  }
  return validate_run_config(run);
}

// The checkpoint's tensors: masters under their own names, the moments as adam_m.* and adam_v.*.
struct HostState {
  std::vector<float> masters, m, v;
};

template <class Entry, class Span>
std::vector<Entry> checkpoint_entries(const GptModel& model, HostState& state) {
  std::vector<Entry> entries;
  for (const char* prefix : {"", "adam_m.", "adam_v."}) {
    std::vector<float>& buffer = prefix[0] == '\0' ? state.masters : (prefix[5] == 'm' ? state.m : state.v);
    for (const ModelTensor& t : model.tensors()) {
      entries.push_back(Entry{prefix + t.name, t.shape, Span(buffer.data() + t.offset, t.numel)});
    }
  }
  return entries;
}

// This rank's checkpoint file: `path` itself for one rank; for a job, its file in the directory `path`.
std::string rank_file(const std::string& path, const LaunchEnv& env) {
  return env.world_size == 1 ? path : checkpoint_rank_path(path, env.rank);
}

// Each rank saves its own shard: the masters, and the moments (whole; a ZeRO rank's outside its shard
// are unused) of its tensors, with the layout and its coordinates in the header.
Status save(const std::string& path, GptModel& model, const RunConfig& run, int64_t step,
            LoaderPosition position, const ParallelLayout& layout, const RankCoords& me) {
  HostState state{model.download(GptModel::Buffer::kMasters), model.download(GptModel::Buffer::kMoment1),
                  model.download(GptModel::Buffer::kMoment2)};
  CheckpointHeader header{run.model, essentials_of(run.train), step, {run.train.seed}, position, layout, me};
  const auto views = checkpoint_entries<TensorView, std::span<const float>>(model, state);
  return save_checkpoint(path, header, views);
}

Result<CheckpointHeader> load(const std::string& path, GptModel& model, const RunConfig& run,
                              const ParallelLayout& layout, const RankCoords& me) {
  Result<CheckpointHeader> header = read_checkpoint_header(path);
  if (!header) return header.error();
  if (Status s = check_resume_compatible(*header, run.model, run.train, layout, me); !s) {
    return make_error(fmt::format("{}: {}", path, s.error().message));
  }
  HostState state{std::vector<float>(model.buffer_floats(), 0.0f),
                  std::vector<float>(model.buffer_floats(), 0.0f),
                  std::vector<float>(model.buffer_floats(), 0.0f)};
  const auto slots = checkpoint_entries<TensorSlot, std::span<float>>(model, state);
  Result<CheckpointHeader> loaded = load_checkpoint(path, slots);
  if (!loaded) return loaded.error();
  model.upload(GptModel::Buffer::kMasters, state.masters);
  model.upload(GptModel::Buffer::kMoment1, state.m);
  model.upload(GptModel::Buffer::kMoment2, state.v);
  return loaded;
}

Status write_floats(const std::filesystem::path& path, const float* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
  if (!out) return Error{"cannot write " + path.string()};
  return {};
}

// Step 0 for tools/trainer_reference.py: meta.json (shapes, offsets, config), params.bin (fp32 masters,
// the model's padded layout), batch.bin (int32 inputs then targets), logits.bin (fp32 [N, Vp]),
// grads.bin (fp32, same layout as params; the gradient of the mean loss of this one batch).
Status dump_step0(const std::string& dir, GptModel& model, const RunConfig& run, const Batch& batch,
                  const std::string& train_glob) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path d(dir);
  const double loss_forward = model.forward(batch.inputs.data(), batch.targets.data());
  const std::vector<float> logits = model.logits();
  model.zero_grads();
  const double loss = model.forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
  const std::vector<float> params = model.download(GptModel::Buffer::kMasters);
  const std::vector<float> grads = model.download(GptModel::Buffer::kGrads);
  if (Status s = write_floats(d / "params.bin", params.data(), params.size()); !s) return s;
  if (Status s = write_floats(d / "grads.bin", grads.data(), grads.size()); !s) return s;
  if (Status s = write_floats(d / "logits.bin", logits.data(), logits.size()); !s) return s;
  {
    std::ofstream out(d / "batch.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(batch.inputs.data()),
              static_cast<std::streamsize>(batch.inputs.size() * sizeof(int32_t)));
    out.write(reinterpret_cast<const char*>(batch.targets.data()),
              static_cast<std::streamsize>(batch.targets.size() * sizeof(int32_t)));
    if (!out) return Error{"cannot write " + (d / "batch.bin").string()};
  }
  const ModelConfig& m = run.model;
  const TrainConfig& t = run.train;
  std::string tensors;
  for (const ModelTensor& mt : model.tensors()) {
    std::string shape;
    for (int64_t x : mt.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(x);
    tensors +=
        fmt::format("{}    {{\"name\": \"{}\", \"shape\": [{}], \"offset\": {}, \"decayed\": {}}}",
                    tensors.empty() ? "" : ",\n", mt.name, shape, mt.offset, mt.decayed ? "true" : "false");
  }
  auto out = fmt::output_file((d / "meta.json").string());
  out.print(
      "{{\n  \"vocab_size\": {}, \"padded_vocab_size\": {}, \"max_seq_len\": {}, \"n_layer\": {}, "
      "\"n_head\": {},\n"
      "  \"d_model\": {}, \"parallel_block\": {}, \"attention_window\": {},\n"
      "  \"batch_size\": {}, \"seq_len\": {}, \"grad_accum_steps\": {}, \"dtype\": \"{}\", \"optimizer\": "
      "\"{}\",\n"
      "  \"learning_rate\": {}, \"min_lr_fraction\": {}, \"warmup_steps\": {}, \"steps\": {}, "
      "\"weight_decay\": {},\n"
      "  \"beta1\": {}, \"beta2\": {}, \"eps\": {}, \"grad_clip\": {}, \"train_glob\": \"{}\",\n"
      "  \"buffer_floats\": {}, \"loss\": {:.9g}, \"loss_forward_only\": {:.9g},\n  \"tensors\": [\n{}\n  "
      "]\n}}\n",
      m.vocab_size, m.padded_vocab_size, m.max_seq_len, m.n_layer, m.n_head, m.d_model,
      m.parallel_block ? "true" : "false", m.attention_window, t.batch_size, t.seq_len, t.grad_accum_steps,
      to_string(t.dtype), to_string(t.optimizer), t.learning_rate, t.min_lr_fraction, t.warmup_steps, t.steps,
      t.weight_decay, t.beta1, t.beta2, t.eps, t.grad_clip, train_glob, model.buffer_floats(), loss,
      loss_forward, tensors);
  fmt::print("step-0 dump in {}: loss {:.6f} (forward only {:.6f})\n", dir, loss, loss_forward);
  return {};
}

// The job this process is a rank of: its place, the layout and, with more than one rank, its NCCL
// communicators (the world's, and each parallel group's split from it).
struct Job {
  LaunchEnv launch;
  std::string cuda_wait;  // how the host waits for the GPU, as set (the job line says it)
  ParallelLayout layout;
  RankCoords me;
  int gpus = 1;  // the distinct GPUs the job runs on (ranks may share them)
  ncclComm_t world = nullptr;
  ncclComm_t tp = nullptr;          // the tensor-parallel group's (tp > 1)
  ncclComm_t dp = nullptr;          // the data-parallel group's (dp > 1)
  ncclComm_t dp_overlap = nullptr;  // a second one for the overlapped reduce-scatters (--dp-overlap)
  ncclComm_t tp_overlap = nullptr;  // a second TP one for the chunked GEMMs' collectives (--tp-overlap)
  ncclComm_t pp = nullptr;          // the pipeline group's (pp > 1)
  ncclComm_t embedding = nullptr;   // the first and last stage's (pp > 1)
  // The pipeline neighbours' two-rank communicators (ModelParallel): activations to the next stage,
  // from the previous; gradients to the previous, from the next.
  ncclComm_t activation_send = nullptr, activation_recv = nullptr, gradient_send = nullptr,
             gradient_recv = nullptr;
  Job() = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() {
    for (const auto& [name, c] : comms()) ncclCommDestroy(c);
  }
  // The communicators this rank holds, named by group.
  std::vector<std::pair<const char*, ncclComm_t>> comms() const {
    std::vector<std::pair<const char*, ncclComm_t>> out;
    for (auto [name, c] :
         {std::pair{"pipeline activations out", activation_send},
          std::pair{"pipeline activations in", activation_recv},
          std::pair{"pipeline gradients out", gradient_send},
          std::pair{"pipeline gradients in", gradient_recv}, std::pair{"embedding", embedding},
          std::pair{"pipeline", pp}, std::pair{"data, overlapped", dp_overlap}, std::pair{"data", dp},
          std::pair{"tensor, overlapped", tp_overlap}, std::pair{"tensor", tp}, std::pair{"world", world}}) {
      if (c != nullptr) out.emplace_back(name, c);
    }
    return out;
  }
  // "" when no communicator reports an asynchronous error (a peer gone, a network failure), else the
  // first one's (ncclCommGetAsyncError: the watchdog's probe).
  std::string async_error() const {
    for (const auto& [name, c] : comms()) {
      ncclResult_t r = ncclSuccess;
      if (ncclCommGetAsyncError(c, &r) != ncclSuccess) continue;
      if (r != ncclSuccess && r != ncclInProgress) {
        return fmt::format("the {} communicator failed: {} ({})", name, ncclGetErrorString(r),
                           ncclGetLastError(c));
      }
    }
    return "";
  }
};

Error nccl_error(const char* call, ncclResult_t r) {
  return make_error(ErrorCode::kDevice,
                    fmt::format("{}: {} ({})", call, ncclGetErrorString(r), ncclGetLastError(nullptr)));
}

// --cuda-wait (checked by CLI11): the host thread's wait for the GPU, set on the current device. A spinning
// wait takes a CPU for the whole of every wait; with several ranks on a host those CPUs are the ones
// NCCL's proxy threads and the net's threads need. Returns the choice as the job line gives it. The
// context exists already (cudaSetDevice made it): CUDA 12 applies the flags to it; an older runtime may
// refuse, and the job then runs on with CUDA's own choice and says so.
std::string set_cuda_wait(const std::string& how, int local_ranks) {
  const bool block = how == "block" || (how == "auto" && local_ranks > 1);
  const unsigned flags = how == "spin"    ? cudaDeviceScheduleSpin
                         : how == "yield" ? cudaDeviceScheduleYield
                         : block          ? cudaDeviceScheduleBlockingSync
                                          : cudaDeviceScheduleAuto;
  std::string said = how != "auto"      ? how
                     : local_ranks > 1 ? fmt::format("block (auto: {} ranks on this host)", local_ranks)
                                       : "CUDA's choice (auto: one rank on this host)";
  if (flags == cudaDeviceScheduleAuto) return said;
  if (cudaError_t e = cudaSetDeviceFlags(flags); e != cudaSuccess) {
    cudaGetLastError();
    said = fmt::format("CUDA's choice (--cuda-wait {} not applied: {})", how, cudaGetErrorString(e));
  }
  return said;
}

// Reads the launcher's variables, checks the layout against them and the model, picks this rank's GPU
// and joins NCCL: every rank sets NCCL_COMM_ID to rank 0's address (unless set) and asks NCCL for the id,
// so rank 0's ncclCommInitRank listens there and no other channel carries it.
Result<std::unique_ptr<Job>> join_job(const Options& o, const RunConfig& run, const LaunchEnv& env) {
  auto job = std::make_unique<Job>();
  job->launch = env;
  const int world = env.world_size;
  ParallelLayout& l = job->layout;
  l.tp = o.tp;
  l.pp = o.pp;
  l.vpp = o.vpp;
  if (l.tp < 1 || l.pp < 1 || world % (l.tp * l.pp) != 0) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("--tp {} x --pp {} must divide the {} ranks ({})", l.tp, l.pp, world, env.source));
  }
  l.dp = o.dp.value_or(world / (l.tp * l.pp));
  if (l.world_size() != world) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}, but {} started {} ranks", describe(l), env.source, world));
  }
  if (Status s = validate_layout(l, run); !s) return s.error();
  job->me = coords_of(l, env.rank);
  if (world == 1) {
    if (o.cuda_wait != "auto") job->cuda_wait = set_cuda_wait(o.cuda_wait, 1);
    return job;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  auto plan = plan_device(env, count, host);
  if (!plan) return plan.error();
  if (!plan->nccl_hostid.empty() && std::getenv("NCCL_HOSTID") == nullptr) {
    ::setenv("NCCL_HOSTID", plan->nccl_hostid.c_str(), 1);
  }
  if (cudaSetDevice(plan->device) != cudaSuccess) {
    return make_error(ErrorCode::kDevice,
                      fmt::format("rank {}: cudaSetDevice({}) failed", env.rank, plan->device));
  }
  job->cuda_wait = set_cuda_wait(o.cuda_wait, env.local_world_size);
  job->gpus = world / env.local_world_size * std::min(env.local_world_size, count);
  ::setenv("NCCL_COMM_ID", nccl_comm_id(env, getenv_lookup()).c_str(), 0);
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  if (ncclResult_t r = ncclCommInitRank(&job->world, world, id, env.rank); r != ncclSuccess) {
    return nccl_error("ncclCommInitRank", r);
  }
  // Every rank calls each split (ncclCommSplit is collective over the world); a rank outside the
  // groups of one (a group of one rank, a pair it is not in) gets no communicator (NCCL_SPLIT_NOCOLOR).
  auto split = [&](const char* what, int color, int key, ncclComm_t* comm) -> Status {
    if (ncclResult_t r = ncclCommSplit(job->world, color, key, comm, nullptr); r != ncclSuccess) {
      return nccl_error(fmt::format("ncclCommSplit ({})", what).c_str(), r);
    }
    return {};
  };
  for (auto [group, comm, size] :
       {std::tuple{Group::kTensor, &job->tp, l.tp}, std::tuple{Group::kData, &job->dp, l.dp},
        std::tuple{Group::kPipeline, &job->pp, l.pp}}) {
    const SplitKey k = split_key(l, group, env.rank);
    const std::string what{to_string(group)};
    if (Status s = split(what.c_str(), size > 1 ? k.color : NCCL_SPLIT_NOCOLOR, k.key, comm); !s)
      return s.error();
  }
  // --dp-overlap, --tp-overlap: the same group again, its collectives running beside the compute stream's.
  for (auto [on, group, comm, size] : {std::tuple{o.dp_overlap, Group::kData, &job->dp_overlap, l.dp},
                                       std::tuple{o.tp_overlap, Group::kTensor, &job->tp_overlap, l.tp}}) {
    if (!on) continue;
    const SplitKey k = split_key(l, group, env.rank);
    const std::string what = std::string(to_string(group)) + ", overlapped";
    if (Status s = split(what.c_str(), size > 1 ? k.color : NCCL_SPLIT_NOCOLOR, k.key, comm); !s)
      return s.error();
  }
  if (l.pp > 1) {
    // Ranks of one pipeline (same tp and dp coordinates) share a color in every pipeline split.
    const int pipeline = job->me.tp + l.tp * job->me.dp;
    const int s = job->me.pp, last = l.pp - 1;
    if (Status st = split("embedding", s == 0 || s == last ? pipeline : NCCL_SPLIT_NOCOLOR, s == 0 ? 0 : 1,
                          &job->embedding);
        !st) {
      return st.error();
    }
    // Edge e joins stage e to stage e + 1 (mod pp: the wrap-around edge only when interleaved). Its
    // activation communicator has the sender (e) as rank 0; its gradient one the sender (e + 1).
    const int edges = l.vpp > 1 ? l.pp : l.pp - 1;
    for (int e = 0; e < edges; ++e) {
      const int next = (e + 1) % l.pp;
      ncclComm_t act = nullptr, grad = nullptr;
      const bool in_edge = s == e || s == next;
      if (Status st = split("activations", in_edge ? pipeline : NCCL_SPLIT_NOCOLOR, s == e ? 0 : 1, &act);
          !st) {
        return st.error();
      }
      if (Status st = split("gradients", in_edge ? pipeline : NCCL_SPLIT_NOCOLOR, s == next ? 0 : 1, &grad);
          !st) {
        return st.error();
      }
      if (!in_edge) continue;
      (s == e ? job->activation_send : job->activation_recv) = act;
      (s == e ? job->gradient_recv : job->gradient_send) = grad;
    }
  }
  return job;
}

// --nproc N without a launcher: forks N ranks of this same program and arguments, with torchrun's
// variables set, and waits for them.
int launch_ranks(const Options& o) {
  fmt::print("megascale-train: starting {} ranks on this host\n", o.nproc);
  std::fflush(stdout);
  return run_self_ranks(o.nproc, o.argv, "megascale-train");
}

// --comm-volume: the bytes a rank of the layout sends per step by group (comm_volume.h), as one JSON
// line, without starting anything.
int print_comm_volume(const Options& o, const RunConfig& run) {
  ParallelLayout l{.tp = o.tp,
                   .pp = o.pp,
                   .dp = o.dp.value_or(std::max(1, o.nproc / std::max(1, o.tp * o.pp))),
                   .vpp = o.vpp};
  if (Status s = validate_layout(l, run); !s) {
    fmt::print(stderr, "{}\n", s.error().message);
    return 2;
  }
  const CommVolume v = comm_volume(l, run);
  fmt::print(
      R"({{"layout":"{}","tp":{},"pp":{},"dp":{},"vpp":{},"tp_bytes":{:.0f},"dp_bytes":{:.0f},"pp_bytes":{:.0f}}})"
      "\n",
      describe(l), l.tp, l.pp, l.dp, l.vpp, v.tp_bytes, v.dp_bytes, v.pp_bytes);
  return 0;
}

int run_training(const Options& options) {
  Result<RunConfig> loaded_config = load_run_config(options.config_path);
  if (!loaded_config) {
    fmt::print(stderr, "{}\n", loaded_config.error().message);
    return 2;
  }
  RunConfig run = *loaded_config;
  if (Status s = apply_overrides(options, run); !s) {
    fmt::print(stderr, "{}: {}\n", options.config_path, s.error().message);
    return 2;
  }
  if (options.comm_volume) return print_comm_volume(options, run);
  if (options.pp_coupled && (options.pp < 2 || options.vpp > 1)) {
    fmt::print(stderr,
               "--pp-coupled needs --pp above 1 and --vpp 1 (got --pp {} --vpp {}): the coupled baseline holds "
               "each send for the next receive, which deadlocks in the interleaved order\n",
               options.pp, options.vpp);
    return 2;
  }
  auto launch = launch_env(getenv_lookup());
  if (!launch) {
    fmt::print(stderr, "{}\n", launch.error().message);
    return 2;
  }
  // Under any launcher (torchrun, Open MPI, Slurm, or the ranks --nproc forked) this process is a rank.
  if (options.nproc > 1 && launch->source == "single process") return launch_ranks(options);
  auto joined = join_job(options, run, *launch);
  if (!joined) {
    fmt::print(stderr, "{}\n", joined.error().message);
    return 2;
  }
  const Job& job = **joined;
  const int dp = job.layout.dp;
  if (job.launch.world_size > 1) {
    if (!options.dump_step0_dir.empty()) {
      fmt::print(stderr, "--dump-step0 is for one rank (the PyTorch reference reads one whole model)\n");
      return 2;
    }
    // One rank speaks for the job: the others print errors only.
    if (job.launch.rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 2;
    fmt::print("job: {} from {} on {} GPU(s); host waits for the GPU: {}\n", describe(job.layout),
               job.launch.source, job.gpus, job.cuda_wait);
  }
  const TrainConfig& train = run.train;
  const int local_batch = train.batch_size / dp;  // validate_layout: dp divides batch_size
  std::string train_glob = train.train_data, val_glob = train.val_data;
  if (train_glob.empty() || val_glob.empty()) {
    Result<DatasetFiles> files = ensure_synthetic_dataset(train.data_dir, DatasetOptions{});
    if (!files) {
      fmt::print(stderr, "embedded dataset: {}\n", files.error().message);
      return 2;
    }
    if (train_glob.empty()) train_glob = files->train_glob;
    if (val_glob.empty()) val_glob = files->val_glob;
    fmt::print("data: the embedded dataset in {} ({} train tokens; a perfect model's loss is {:.3f})\n",
               train.data_dir, files->train_tokens, files->train_choice_entropy_nats_per_token);
  }
  // Data-parallel rank r reads rows [r B/dp, (r + 1) B/dp) of the one-rank batch: the same global batch.
  // The ranks of a tensor-parallel group read the same rows.
  const LoaderOptions loader_options{.batch_size = local_batch,
                                     .seq_len = train.seq_len,
                                     .process_rank = job.me.dp,
                                     .num_processes = dp,
                                     .vocab_size = run.model.vocab_size};
  auto loader = DataLoader::open(train_glob, loader_options);
  if (!loader) {
    fmt::print(stderr, "train data: {}\n", loader.error().message);
    return 2;
  }
  const ModelParallel parallel{.layout = job.layout,
                               .me = job.me,
                               .micro_batches = train.grad_accum_steps,
                               .world_comm = job.world,
                               .tp_comm = job.tp,
                               .dp_comm = job.dp,
                               .dp_overlap_comm = job.dp_overlap,
                               .tp_overlap_comm = job.tp_overlap,
                               .pp_comm = job.pp,
                               .embedding_comm = job.embedding,
                               .activation_send = job.activation_send,
                               .activation_recv = job.activation_recv,
                               .gradient_send = job.gradient_send,
                               .gradient_recv = job.gradient_recv,
                               .pp_coupled = options.pp_coupled};
  auto model_or = GptModel::create(run.model, train.dtype, local_batch, train.seq_len, parallel);
  if (!model_or) {
    fmt::print(stderr, "{}\n", model_or.error().message);
    return 2;
  }
  GptModel& model = **model_or;
  // With several ranks: a communicator's asynchronous error, or a step past --step-timeout, aborts the
  // communicators (which ends the collectives this rank waits in) and exits 3, naming the cause.
  std::unique_ptr<Watchdog> watchdog;
  if (job.layout.world_size() > 1) {
    const int rank = job.launch.rank;
    watchdog = std::make_unique<Watchdog>(
        Watchdog::Options{.step_timeout_s = options.step_timeout_s}, [&job] { return job.async_error(); },
        [&job, rank](const std::string& why) {
          fmt::print(stderr, "megascale-train: rank {}: {}; aborting its communicators\n", rank, why);
          std::fflush(stderr);
          exit_after(std::chrono::seconds(10), 3,
                     fmt::format("megascale-train: rank {}: ncclCommAbort did not return within 10 s; exiting "
                                 "without it",
                                 rank));
          for (const auto& [name, c] : job.comms()) ncclCommAbort(c);
          std::_Exit(3);
        });
  }
  model.init_gpt2(train.seed);
  fmt::print(
      "{}\nparameters {} | dtype {} | optimizer {} | attention: {}, {}\n{}\n", describe(run),
      model.num_parameters(), to_string(train.dtype), to_string(train.optimizer),
      MEGASCALE_TRAINER_ATTENTION_NAME,
      attention_deterministic()
          ? "deterministic backward"
          : "unordered backward (MEGASCALE_ATTENTION_DETERMINISTIC=0: faster, not bit-reproducible, so "
            "a resumed run will not repeat a fresh one's losses exactly)",
      mfu_peak_statement());

  int start_step = 0;
  if (!options.resume_path.empty()) {
    const bool is_dir = std::filesystem::is_directory(options.resume_path);
    if (is_dir != (job.launch.world_size > 1)) {
      fmt::print(stderr, "--resume {}: {}\n", options.resume_path,
                 is_dir
                     ? "a directory of rank files, but this run is one rank: pass a ckpt_*.bin file"
                     : fmt::format("not a directory: a job of {} ranks resumes from the ckpt_* directory its "
                                   "ranks wrote, one file each",
                                   job.launch.world_size));
      return 2;
    }
    Result<CheckpointHeader> header =
        load(rank_file(options.resume_path, job.launch), model, run, job.layout, job.me);
    if (!header) {
      fmt::print(stderr, "--resume: {}\n", header.error().message);
      return 2;
    }
    if (Status s = (*loader)->set_position(header->loader); !s) {
      fmt::print(stderr, "--resume: loader position: {}\n", s.error().message);
      return 2;
    }
    start_step = static_cast<int>(header->step);
    fmt::print("resumed from {} at step {}\n", options.resume_path, start_step);
  }

  Batch batch;
  if (!options.dump_step0_dir.empty()) {
    if (Status s = (*loader)->next(batch); !s) {
      fmt::print(stderr, "train data: {}\n", s.error().message);
      return 2;
    }
    if (Status s = dump_step0(options.dump_step0_dir, model, run, batch, train_glob); !s) {
      fmt::print(stderr, "--dump-step0: {}\n", s.error().message);
      return 2;
    }
    return 0;
  }

  std::unique_ptr<std::ofstream> loss_log;
  if (!options.loss_log_path.empty() && job.launch.rank == 0) {  // the loss is the job's: one writer
    loss_log = std::make_unique<std::ofstream>(options.loss_log_path,
                                               start_step > 0 ? std::ios::app : std::ios::trunc);
  }
  const CosineSchedule schedule = CosineSchedule::from(train);
  const double flops = flops_per_token(run.model, train.seq_len);
  const float micro_scale = 1.0f / static_cast<float>(train.grad_accum_steps);
  double timed_ms = 0;
  int64_t timed_tokens = 0;
  int steps_here = 0;
  const bool timeline = !options.timeline_dir.empty();
  StageProfiler* profiler = options.profile || timeline ? model.enable_stage_profiler() : nullptr;
  // A step's micro-batches, all loaded before its passes (a pipeline runs them interleaved).
  std::vector<Batch> micro_batches(static_cast<size_t>(train.grad_accum_steps));
  std::vector<const int32_t*> inputs(micro_batches.size()), targets(micro_batches.size());
  for (int step = start_step; step < train.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    if (watchdog) watchdog->step_begin(step);
    if (profiler != nullptr) profiler->begin_step();
    model.zero_grads();
    for (int micro = 0; micro < train.grad_accum_steps; ++micro) {
      Batch& b = micro_batches[static_cast<size_t>(micro)];
      if (Status s = (*loader)->next(b); !s) {
        fmt::print(stderr, "train data: {}\n", s.error().message);
        return 1;
      }
      inputs[static_cast<size_t>(micro)] = b.inputs.data();
      targets[static_cast<size_t>(micro)] = b.targets.data();
    }
    double loss = model.data_parallel_mean(model.train_step(inputs, targets, micro_scale));
    const double norm = model.grad_norm();
    const double lr = schedule.learning_rate(step);
    model.optimizer_step(train, lr, step + 1, norm);
    if (watchdog) watchdog->step_end();
    if (profiler != nullptr) {
      profiler->end_step();
      if (steps_here == 0) {  // the first step warms up cuBLASLt and the allocator
        profiler->reset();
        if (timeline) {
          char host[256] = {};
          ::gethostname(host, sizeof(host) - 1);
          profiler->enable_trace(
              static_cast<long>(::getpid()),
              fmt::format("rank {} (tp {}, dp {}, pp {})", job.launch.rank, job.me.tp, job.me.dp, job.me.pp),
              host, options.timeline_steps);
        }
      }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    StepReport report{step, train.steps, loss, norm, lr, ms, train.tokens_per_step(), job.gpus};
    if (profiler != nullptr) {  // this rank's exposed communication (exposure.h)
      fmt::print("{} | comm exposed {:.2f} of {:.2f} ms GPU\n", format_step_line(report, flops),
                 profiler->last_exposed_ms(), profiler->last_span_ms());
    } else {
      fmt::print("{}\n", format_step_line(report, flops));
    }
    std::fflush(stdout);
    if (loss_log) *loss_log << step << ' ' << fmt::format("{:.9g} {:.9g}", loss, norm) << '\n';
    if (steps_here > 0) {  // the first step of a process warms up cuBLASLt and the allocator
      timed_ms += ms;
      timed_tokens += train.tokens_per_step();
    }
    ++steps_here;
    const bool last = step + 1 == train.steps || (options.stop_after > 0 && steps_here == options.stop_after);
    if (train.eval_every > 0 && ((step + 1) % train.eval_every == 0 || step + 1 == train.steps)) {
      auto val = DataLoader::open(val_glob, LoaderOptions{.batch_size = local_batch,
                                                          .seq_len = train.seq_len,
                                                          .process_rank = job.me.dp,
                                                          .num_processes = dp,
                                                          .vocab_size = run.model.vocab_size,
                                                          .prefetch = false});
      if (val) {
        double val_loss = 0;
        int n = 0;
        Batch vb;
        for (; n < train.eval_batches && (*val)->next(vb); ++n)
          val_loss += model.forward(vb.inputs.data(), vb.targets.data());
        if (n > 0) fmt::print("val loss {:.6f} ({} batches)\n", model.data_parallel_mean(val_loss / n), n);
      }
    }
    if (!train.checkpoint_dir.empty() &&
        ((train.checkpoint_every > 0 && (step + 1) % train.checkpoint_every == 0) || last)) {
      // One rank: ckpt_N.bin; a job: the directory ckpt_N/ with a file per rank.
      const bool one = job.launch.world_size == 1;
      const std::string path =
          fmt::format("{}/ckpt_{:08d}{}", train.checkpoint_dir, step + 1, one ? ".bin" : "");
      std::filesystem::create_directories(one ? train.checkpoint_dir : path);
      if (Status s = save(rank_file(path, job.launch), model, run, step + 1, (*loader)->position(),
                          job.layout, job.me);
          !s) {
        fmt::print(stderr, "checkpoint: {}\n", s.error().message);
        return 1;
      }
      fmt::print("checkpoint {}\n", path);
    }
    if (last) break;
  }
  if (timed_tokens > 0) {
    const double seconds = timed_ms / 1e3;
    fmt::print(
        "average over {} steps after the first: {:.2f} ms/step, {:.0f} tok/s, {:.1f} TFLOP/s, {:.1f}% MFU\n",
        steps_here - 1, timed_ms / (steps_here - 1), static_cast<double>(timed_tokens) / seconds,
        achieved_flops_per_s(flops, timed_tokens, seconds) / job.gpus / 1e12,
        100.0 * model_flops_utilization(flops, timed_tokens, seconds) / job.gpus);
  }
  if (profiler != nullptr) fmt::print("{}", profiler->table());
  if (timeline) {
    std::error_code ec;
    std::filesystem::create_directories(options.timeline_dir, ec);
    const std::string path = fmt::format("{}/rank_{:05d}.trace.json", options.timeline_dir, job.launch.rank);
    std::ofstream out(path);
    out << profiler->trace_json();
    if (!out) {
      fmt::print(stderr, "--timeline: cannot write {}\n", path);
      return 1;
    }
    fmt::print("timeline: {} (scripts/megascale-trace-merge.py OUT.json {}/*.trace.json merges the ranks')\n",
               path, options.timeline_dir);
  }
  return 0;
}

}  // namespace
}  // namespace megascale::trainer

int main(int argc, char** argv) {
  megascale::trainer::Options o;
  o.argv.assign(argv, argv + argc);
  CLI::App app{
      "megascale-train: a GPT trainer (configs/train/*.yaml), one GPU, or tensor, pipeline and data parallel "
      "over NCCL"};
  app.add_option("--config", o.config_path, "run config, e.g. configs/train/tiny.yaml")->required();
  app.add_option("--steps", o.steps, "optimizer steps (overrides train.steps)");
  app.add_option("--batch-size", o.batch_size, "sequences per micro-step");
  app.add_option("--seq-len", o.seq_len, "tokens per sequence");
  app.add_option("--grad-accum", o.grad_accum, "micro-steps per optimizer step");
  app.add_option("--dtype", o.dtype, "bf16 | fp32");
  app.add_option("--optimizer", o.optimizer, "adamw | lamb");
  app.add_flag("--parallel-block", o.parallel_block, "y = x + Attn(LN1(x)) + MLP(LN2(x))");
  app.add_option("--attention-window", o.window, "sliding window in tokens (0 = full causal)");
  app.add_option("--seed", o.seed, "init seed");
  app.add_option("--eval-every", o.eval_every, "steps between validation passes (0 = never)");
  app.add_option("--train-data", o.train_data, "glob of llm.c shards (default: the embedded dataset)");
  app.add_option("--val-data", o.val_data, "glob of llm.c shards (default: the embedded dataset)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where checkpoints go");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: only at the end)");
  app.add_option("--resume", o.resume_path,
                 "checkpoint to continue from: a file for one rank, a directory of rank files for a job");
  app.add_option("--stop-after", o.stop_after,
                 "stop (with a checkpoint) after this many steps of this process");
  app.add_option(
         "--step-timeout", o.step_timeout_s,
         "with several ranks, end the job with an error when a step runs longer than this many seconds "
         "(a peer stopped or vanished; NCCL never times out by itself); 0: no deadline")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cuda-wait", o.cuda_wait,
                 "how the host waits for the GPU: auto (block when ranks share this host, else CUDA's "
                 "choice), spin, yield or block")
      ->check(CLI::IsMember({"auto", "spin", "yield", "block"}));
  app.add_option("--loss-log", o.loss_log_path, "append 'step loss grad_norm' lines here");
  app.add_option("--dump-step0", o.dump_step0_dir,
                 "write step 0 (weights, batch, logits, grads) here and exit");
  app.add_flag("--profile", o.profile,
               "time each stage of the step with CUDA events and print a table at the end "
               "(also MEGASCALE_TRAIN_PROFILE=1)");
  app.add_option(
      "--timeline", o.timeline_dir,
      "write each rank's Chrome trace of steps 2.. (CUDA events around every stage and collective) "
      "here as rank_NNNNN.trace.json; turns the profile on");
  app.add_option("--timeline-steps", o.timeline_steps, "steps the timeline keeps (default 3)");
  app.add_flag("--comm-volume", o.comm_volume,
               "print the bytes a rank of the layout sends per step in each group (JSON) and exit");
  app.add_option("--nproc", o.nproc,
                 "fork this many ranks on this host (torchrun's variables set for each); under a launcher "
                 "(torchrun, Open MPI, Slurm) it is ignored");
  app.add_option("--tp", o.tp, "tensor-parallel ranks (with sequence parallel)");
  app.add_option("--pp", o.pp, "pipeline stages (1F1B; interleaved with --vpp above 1)");
  app.add_option("--vpp", o.vpp, "virtual stages per pipeline rank");
  app.add_option("--dp", o.dp, "data-parallel replicas (default: ranks / (tp x pp))");
  app.add_flag(
      "--dp-overlap", o.dp_overlap,
      "reduce-scatter each layer's gradients as the step's last backward through it ends, and "
      "all-gather the parameters ahead of the next forward, on a stream and communicator of their own");
  app.add_flag("--pp-coupled", o.pp_coupled,
               "the coupled baseline: pipeline sends and receives on the compute stream, each send in one "
               "group with the next receive (1F1B only); by default they run on streams of their own");
  app.add_flag(
      "--tp-overlap", o.tp_overlap,
      "cut each tensor-parallel GEMM into a block of rows per rank, pipelined with its all-gather or "
      "reduction on a stream and communicator of their own");
  CLI11_PARSE(app, argc, argv);
  if (const char* env = std::getenv("MEGASCALE_TRAIN_PROFILE"); env != nullptr && std::string(env) == "1")
    o.profile = true;
  return megascale::trainer::run_training(o);
}
