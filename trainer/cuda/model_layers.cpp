// GptImpl's layers (model_impl.h): the forward and backward of a chunk of layers, the head and the loss,
// with tensor parallel's row exchanges.
#include "model_impl.h"

namespace megascale::trainer::detail {

template <class T>
void GptImpl<T>::upload_batch(int mb, const int32_t* inputs_host, const int32_t* targets_host) {
  static_assert(sizeof(int32_t) == sizeof(int));
  StageScope scope(profiler_.get(), Stage::kHostCopies);
  CUDA_CHECK(cudaMemcpyAsync(tokens_ + static_cast<size_t>(mb) * N_, inputs_host, N_ * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(targets_ + static_cast<size_t>(mb) * N_, targets_host, N_ * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
}

template <class T>
void GptImpl<T>::upload_buckets(int mb, const int32_t* inputs_host) {
  StageScope scope(profiler_.get(), Stage::kHostCopies);
  HostBuckets& h = buckets_[static_cast<size_t>(mb)];
  TokenBuckets all = make_token_buckets(inputs_host, N_);
  const auto first = std::lower_bound(all.bucket_token.begin(), all.bucket_token.end(), vocab_begin_);
  const auto last = std::lower_bound(first, all.bucket_token.end(), vocab_begin_ + Vl_);
  const size_t b0 = static_cast<size_t>(first - all.bucket_token.begin());
  h.count = static_cast<int>(last - first);
  h.token.assign(first, last);
  for (int& t : h.token) t -= vocab_begin_;
  h.offset.assign(all.bucket_offset.begin() + static_cast<std::ptrdiff_t>(b0),
                  all.bucket_offset.begin() + static_cast<std::ptrdiff_t>(b0) + h.count + 1);
  h.positions = std::move(all.positions);
  const size_t base = static_cast<size_t>(mb);
  CUDA_CHECK(cudaMemcpyAsync(bucket_token_ + base * N_, h.token.data(), h.count * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(bucket_offset_ + base * (N_ + 1), h.offset.data(), (h.count + 1) * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(positions_ + base * N_, h.positions.data(), N_ * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
}

template <class T>
void GptImpl<T>::run_forward_chunk(int region, int chunk, int mb) {
  StageProfiler* const prof = profiler_.get();
  const int C = cfg_.d_model, D = cfg_.head_dim(), Cl = Cl_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool tp = tp_ > 1;
  if (first_stage(chunk)) {
    wait_params(rest_bucket());
    StageScope scope(prof, Stage::kEncoderForward);
    const int* tokens = tokens_ + static_cast<size_t>(mb) * N_;
    if (!tp) {
      encoder_forward<T>(residual_at(region, 0), tokens, param("wte"), param("wpe"), B_, S_, C, stream_);
    } else {  // each rank its vocabulary rows (rank 0 adds wpe), summed and scattered by rows
      encoder_forward<T>(full_, tokens, param("wte"), tp_rank_ == 0 ? param("wpe") : nullptr, B_, S_, C,
                         stream_, vocab_begin_, vocab_begin_ + Vl_);
      reduce_scatter_rows(full_, residual_at(region, 0), C);
    }
  }
  for (int i = 0; i < Lc_; ++i) {
    const int l = chunk * Lc_ + i;  // this rank's layer (parameters, and its bucket)
    wait_params(l);
    const T* x = residual_at(region, i);
    T* ln1 = ln1_ + at_layer(region, i, N_, C);
    T* ln2 = ln2_ + at_layer(region, i, N_, C);
    T* qkv = qkv_ + at_layer(region, i, N_, 3 * Cl);
    T* atty = atty_ + at_layer(region, i, N_, Cl);
    T* mid = mid_ + at_layer(region, i, n_, C);
    T* fch_pre = fch_pre_ + at_layer(region, i, N_, 4 * Cl);
    T* fch = fch_ + at_layer(region, i, N_, 4 * Cl);
    T* out = residual_at(region, i + 1);
    staged(Stage::kLayerNormForward, [&] {
      layernorm_forward<T>(mine(ln1, C), mean_of(region, 2 * i), rstd_of(region, 2 * i), x, param("ln1w", l),
                           param("ln1b", l), n_, C, stream_);
    });
    gather_then(mine(ln1, C), ln1, C, [&](size_t r, size_t rows, const T* in, bool) {
      staged(Stage::kMatmulQkvForward, [&] {
        matmul_forward<T>(matmul_, qkv + r * 3 * Cl, in, param("qkvw", l), param("qkvb", l), nullptr, nullptr,
                          static_cast<int>(rows), C, 3 * Cl, stream_);
      });
    });
    staged(Stage::kAttentionForward, [&] {
      attention_forward<T>(atty, lse_ + at_layer(region, i, N_, Hl_), qkv, qkv + Cl, qkv + 2 * Cl, B_, S_,
                           Hl_, D, 3 * Cl, Cl, cfg_.attention_window, scale, stream_);
    });
    // Row parallel: [N, C] partial sums in full_ (the parallel block's are reduced with fcproj's).
    auto attproj_rows = [&](size_t r, size_t rows, bool) {
      staged(Stage::kMatmulAttProjForward, [&] {
        matmul_forward<T>(matmul_, full_ + r * C, atty + r * Cl, param("attprojw", l), nullptr, nullptr,
                          nullptr, static_cast<int>(rows), Cl, C, stream_);
      });
    };
    if (!tp) {
      staged(Stage::kMatmulAttProjForward, [&] {
        matmul_forward<T>(matmul_, mid, atty, param("attprojw", l), param("attprojb", l), x, nullptr, N_, C,
                          C, stream_);
      });
    } else if (cfg_.parallel_block) {
      attproj_rows(0, static_cast<size_t>(N_), true);
    } else {
      matmul_then_reduce(full_, mid, C, attproj_rows);
      wait_tp();
      residual_add<T>(mid, mid, param("attprojb", l), nullptr, x, n_, C, stream_);
    }
    // Sequential: the MLP reads the attention's output; parallel: it reads the block's input.
    const T* mlp_in = cfg_.parallel_block ? x : mid;
    staged(Stage::kLayerNormForward, [&] {
      layernorm_forward<T>(mine(ln2, C), mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), mlp_in,
                           param("ln2w", l), param("ln2b", l), n_, C, stream_);
    });
    gather_then(mine(ln2, C), ln2, C, [&](size_t r, size_t rows, const T* in, bool) {
      staged(Stage::kMatmulFcForward, [&] {
        matmul_forward<T>(matmul_, fch + r * 4 * Cl, in, param("fcw", l), param("fcb", l), nullptr,
                          fch_pre + r * 4 * Cl, static_cast<int>(rows), C, 4 * Cl, stream_);
      });
    });
    if (!tp) {
      staged(Stage::kMatmulFcProjForward, [&] {
        matmul_forward<T>(matmul_, out, fch, param("fcprojw", l), param("fcprojb", l), mid, nullptr, N_,
                          4 * C, C, stream_);
      });
    } else {  // the parallel block adds the attention's partial sum, still in full_
      matmul_then_reduce(full_, out, C, [&](size_t r, size_t rows, bool) {
        staged(Stage::kMatmulFcProjForward, [&] {
          matmul_forward<T>(matmul_, full_ + r * C, fch + r * 4 * Cl, param("fcprojw", l), nullptr,
                            cfg_.parallel_block ? full_ + r * C : nullptr, nullptr, static_cast<int>(rows),
                            4 * Cl, C, stream_);
        });
      });
      wait_tp();
      if (cfg_.parallel_block) {
        residual_add<T>(out, out, param("fcprojb", l), param("attprojb", l), x, n_, C, stream_);
      } else {
        residual_add<T>(out, out, param("fcprojb", l), nullptr, mid, n_, C, stream_);
      }
    }
  }
}

template <class T>
void GptImpl<T>::run_head(int region, int mb, float dloss_scale, bool backward, bool overwrite) {
  const int C = cfg_.d_model;
  const int lnf = 2 * Lc_;
  const T* x = residual_at(region, Lc_);
  wait_params(rest_bucket());
  staged(Stage::kLayerNormForward, [&] {
    layernorm_forward<T>(mine(lnf_, C), mean_of(region, lnf), rstd_of(region, lnf), x, param("lnfw"),
                         param("lnfb"), n_, C, stream_);
  });
  gather_rows(mine(lnf_, C), lnf_, C);
  staged(Stage::kMatmulLmHeadForward, [&] {
    matmul_forward<T>(matmul_, logits_, lnf_, param("wte"), nullptr, nullptr, nullptr, N_, C, Vl_, stream_);
  });
  run_classifier(targets_ + static_cast<size_t>(mb) * N_, dloss_scale, backward);
  if (!backward) return;
  staged(Stage::kMatmulLmHeadBackward, [&] {
    matmul_backward<T>(matmul_, dbuf1_, grad("wte"), nullptr, logits_, lnf_, param("wte"), nullptr, false, N_,
                       C, Vl_, stream_, overwrite);
  });
  reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
  CUDA_CHECK(cudaMemsetAsync(dres_, 0, n_ * C * sizeof(T), stream_));
  // Sequential blocks: the LayerNorm backward also sums the residual gradient it leaves, the bias
  // gradient of the last layer's fcproj (see run_backward_chunk).
  const int last_layer = (vpp_ - 1) * Lc_ + Lc_ - 1;
  staged(Stage::kLayerNormBackward, [&] {
    layernorm_backward<T>(dres_, grad("lnfw"), grad("lnfb"), mine(dbuf1_, C), x, param("lnfw"),
                          mean_of(region, lnf), rstd_of(region, lnf), n_, C, scratch_, stream_,
                          cfg_.parallel_block ? nullptr : grad("fcprojb", last_layer));
  });
}

template <class T>
void GptImpl<T>::run_classifier(const int* targets, float dloss_scale, bool write_dlogits) {
  const int V = cfg_.vocab_size;
  if (tp_ == 1) {
    staged(Stage::kClassifier, [&] {
      classifier_forward_backward<T>(logits_, losses_, targets, N_, V, cfg_.padded_vocab_size, dloss_scale,
                                     write_dlogits, stream_);
    });
    return;
  }
  float* row_max = vocab_stats_;
  float* sums = vocab_stats_ + N_;  // sum of exp, then the target's logit
  staged(Stage::kClassifier,
         [&] { classifier_vp_max<T>(logits_, row_max, N_, Vl_, vocab_begin_, V, stream_); });
  staged(Stage::kTpAllReduce, [&] {
    nccl_check(ncclAllReduce(row_max, row_max, N_, ncclFloat, ncclMax, tp_comm_, stream_), "ncclAllReduce");
  });
  staged(Stage::kClassifier,
         [&] { classifier_vp_sums<T>(logits_, row_max, sums, targets, N_, Vl_, vocab_begin_, V, stream_); });
  staged(Stage::kTpAllReduce, [&] {
    nccl_check(ncclAllReduce(sums, sums, 2 * static_cast<size_t>(N_), ncclFloat, ncclSum, tp_comm_, stream_),
               "ncclAllReduce");
  });
  staged(Stage::kClassifier, [&] {
    classifier_vp_finish<T>(logits_, losses_, row_max, sums, targets, N_, Vl_, vocab_begin_, V, dloss_scale,
                            write_dlogits, stream_);
  });
}

template <class T>
void GptImpl<T>::run_backward_chunk(int region, int chunk, int mb, bool overwrite) {
  const int C = cfg_.d_model, D = cfg_.head_dim(), Cl = Cl_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool tp = tp_ > 1;
  // Sequential blocks: each LayerNorm backward also sums the residual gradient it leaves, which is the
  // bias gradient of the projection that added into that residual (fcproj of the block below, attproj
  // of its own block), so those projections' backwards skip cuBLASLt's separate bias-gradient pass.
  // Below a chunk's first layer the block is another chunk's: its fcproj's bias gets its own sum there.
  const bool sequential = !cfg_.parallel_block;
  // dres on all N rows: itself, or all-gathered into full_.
  auto gathered_dres = [&]() -> T* {
    if (!tp) return dres_;
    gather_rows(dres_, full_, C);
    return full_;
  };
  for (int i = Lc_ - 1; i >= 0; --i) {
    const int l = chunk * Lc_ + i;
    const T* x = residual_at(region, i);
    const T* mid = mid_ + at_layer(region, i, n_, C);
    const T* qkv = qkv_ + at_layer(region, i, N_, 3 * Cl);
    const T* atty = atty_ + at_layer(region, i, N_, Cl);
    const T* ln1 = ln1_ + at_layer(region, i, N_, C);
    const T* ln2 = ln2_ + at_layer(region, i, N_, C);
    const T* fch = fch_ + at_layer(region, i, N_, 4 * Cl);
    const T* fch_pre = fch_pre_ + at_layer(region, i, N_, 4 * Cl);
    const float* lse = lse_ + at_layer(region, i, N_, Hl_);
    if (sequential && i == Lc_ - 1 && !last_stage(chunk)) {
      // The chunk's output gradient came from the next stage: fcproj's bias gradient is its sum here.
      column_sum<T>(grad("fcprojb", l), dres_, n_, C, stream_);
    }
    if (tp && cfg_.parallel_block) {  // both projections' biases: dres summed over this rank's rows
      column_sum<T>(grad("fcprojb", l), dres_, n_, C, stream_);
      column_sum<T>(grad("attprojb", l), dres_, n_, C, stream_);
    }
    // MLP: dres is the gradient of the block output; the DGELU epilogue gives d(fch_pre) directly. In
    // the parallel block (y = x + attproj(...) + fcproj(...)) both branches see dres.
    gather_then(dres_, full_, C, [&](size_t r, size_t rows, const T* dout, bool first) {
      staged(Stage::kMatmulFcProjBackward, [&] {
        matmul_backward<T>(matmul_, dfch_ + r * 4 * Cl, grad("fcprojw", l),
                           sequential || tp ? nullptr : grad("fcprojb", l), dout, fch + r * 4 * Cl,
                           param("fcprojw", l), fch_pre + r * 4 * Cl, false, static_cast<int>(rows), 4 * Cl,
                           C, stream_, overwrite && first);
      });
      if (!cfg_.parallel_block) return;
      staged(Stage::kMatmulAttProjBackward, [&] {
        matmul_backward<T>(matmul_, dbuf2_ + r * Cl, grad("attprojw", l), tp ? nullptr : grad("attprojb", l),
                           dout, atty + r * Cl, param("attprojw", l), nullptr, false, static_cast<int>(rows),
                           Cl, C, stream_, overwrite && first);
      });
    });
    // The column-parallel GEMMs' input gradients: [N, C] partial sums over this rank's heads or columns.
    auto fc_rows = [&](size_t r, size_t rows, bool first) {
      staged(Stage::kMatmulFcBackward, [&] {
        matmul_backward<T>(matmul_, dbuf1_ + r * C, grad("fcw", l), grad("fcb", l), dfch_ + r * 4 * Cl,
                           ln2 + r * C, param("fcw", l), nullptr, false, static_cast<int>(rows), C, 4 * Cl,
                           stream_, overwrite && first);
      });
    };
    auto qkv_rows = [&](T* dinp) {
      return [&, dinp](size_t r, size_t rows, bool first) {
        staged(Stage::kMatmulQkvBackward, [&] {
          matmul_backward<T>(matmul_, dinp + r * C, grad("qkvw", l), grad("qkvb", l), dqkv_ + r * 3 * Cl,
                             ln1 + r * C, param("qkvw", l), nullptr, false, static_cast<int>(rows), C, 3 * Cl,
                             stream_, overwrite && first);
        });
      };
    };
    if (cfg_.parallel_block) {
      matmul_then_reduce(dbuf1_, mine(dbuf1_, C), C, fc_rows);  // reduced during the attention's backward
      staged(Stage::kAttentionBackward, [&] {
        attention_backward<T>(dqkv_, dqkv_ + Cl, dqkv_ + 2 * Cl, dbuf2_, atty, lse, qkv, qkv + Cl,
                              qkv + 2 * Cl, B_, S_, Hl_, D, 3 * Cl, Cl, cfg_.attention_window, scale,
                              attention_workspace_, stream_);
      });
      matmul_then_reduce(dbuf2_, mine(dbuf2_, C), C, qkv_rows(dbuf2_));
      wait_tp();
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), mine(dbuf1_, C), x, param("ln2w", l),
                              mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), n_, C, scratch_,
                              stream_);
      });
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), mine(dbuf2_, C), x, param("ln1w", l),
                              mean_of(region, 2 * i), rstd_of(region, 2 * i), n_, C, scratch_, stream_);
      });
      bucket_done(l);
      continue;
    }
    matmul_then_reduce(dbuf1_, mine(dbuf1_, C), C, fc_rows);
    wait_tp();
    staged(Stage::kLayerNormBackward, [&] {
      layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), mine(dbuf1_, C), mid, param("ln2w", l),
                            mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), n_, C, scratch_, stream_,
                            grad("attprojb", l));
    });
    // dres is now the gradient of mid = x + attproj(atty).
    gather_then(dres_, full_, C, [&](size_t r, size_t rows, const T* dmid, bool first) {
      staged(Stage::kMatmulAttProjBackward, [&] {
        matmul_backward<T>(matmul_, dbuf2_ + r * Cl, grad("attprojw", l), nullptr, dmid, atty + r * Cl,
                           param("attprojw", l), nullptr, false, static_cast<int>(rows), Cl, C, stream_,
                           overwrite && first);
      });
    });
    staged(Stage::kAttentionBackward, [&] {
      attention_backward<T>(dqkv_, dqkv_ + Cl, dqkv_ + 2 * Cl, dbuf2_, atty, lse, qkv, qkv + Cl, qkv + 2 * Cl,
                            B_, S_, Hl_, D, 3 * Cl, Cl, cfg_.attention_window, scale, attention_workspace_,
                            stream_);
    });
    matmul_then_reduce(dbuf1_, mine(dbuf1_, C), C, qkv_rows(dbuf1_));
    wait_tp();
    staged(Stage::kLayerNormBackward, [&] {
      layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), mine(dbuf1_, C), x, param("ln1w", l),
                            mean_of(region, 2 * i), rstd_of(region, 2 * i), n_, C, scratch_, stream_,
                            i > 0 ? grad("fcprojb", l - 1) : nullptr);
    });
    bucket_done(l);
  }
  if (!first_stage(chunk)) return;
  const HostBuckets& h = buckets_[static_cast<size_t>(mb)];
  const size_t base = static_cast<size_t>(mb);
  const T* demb = gathered_dres();  // wpe's gradient is then whole on every rank
  staged(Stage::kEncoderBackward, [&] {
    encoder_backward<T>(grad("wte"), grad("wpe"), demb, bucket_token_ + base * N_,
                        bucket_offset_ + base * (N_ + 1), positions_ + base * N_, h.count, B_, S_, C,
                        stream_);
  });
}

template class GptImpl<float>;
template class GptImpl<__nv_bfloat16>;

}  // namespace megascale::trainer::detail
