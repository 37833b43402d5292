#include "engine/cpu_forward.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu_matmul.h"
#include "engine/cpu_ops.h"
#include "engine/kv_eviction.h"
#include "engine/mapped_file.h"
#include "engine/q4_0_interleaved.h"
#include "engine/thread_pool.h"

namespace kvscope {

CpuForward::CpuForward(const ModelConfig& config, const ModelWeights& weights, KvCacheStorage& kv,
                       ThreadPool& pool)
    : config_(config), file_weights_(weights), weights_(weights), kv_(kv), pool_(pool) {
    int half = config.head_dim / 2;
    inv_freq_.resize(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i)
        inv_freq_[static_cast<size_t>(i)] =
            1.0f / std::pow(config.rope_theta,
                            static_cast<float>(2 * i) / static_cast<float>(config.head_dim));
}

void CpuForward::set_matmul_mode(MatmulMode mode) {
    if (mode == matmul_mode_) return;
    matmul_mode_ = mode;
    weights_ = mode == MatmulMode::kFast ? with_interleaved_q4_0(file_weights_) : file_weights_;
}

namespace {
// Index of the first NaN or Inf in x[0..n), or n. Branch-free over the exponent bits so the
// scan vectorizes: it runs once per layer over the residual stream.
size_t first_nonfinite(const float* x, size_t n) {
    constexpr size_t kChunk = 256;
    for (size_t begin = 0; begin < n; begin += kChunk) {
        const size_t end = std::min(n, begin + kChunk);
        uint32_t bad = 0;
        for (size_t i = begin; i < end; ++i) {
            uint32_t bits;
            std::memcpy(&bits, &x[i], 4);
            bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (size_t i = begin; i < end; ++i)
                if (!std::isfinite(x[i])) return i;
    }
    return n;
}

// Calls visit(logical_block, first_slot, count) for the key slots below `len` a chunk's row may
// attend to, in slot order: every block's, or with lanes only the blocks still held (a block
// given back holds holes only, which score nothing).
template <class Visit>
void for_each_key_span(const SequenceChunk& chunk, int block_size, int len, Visit&& visit) {
    if (chunk.lanes) {
        chunk.lanes->for_each_held_span(
            len, [&](int32_t first, int32_t count) { visit(first / block_size, first, count); });
        return;
    }
    for (int first = 0, block = 0; first < len; first += block_size, ++block)
        visit(block, first, std::min(block_size, len - first));
}

void add_bias(float* rows, int n_rows, const Vector& bias) {
    if (!bias.data) return;
    for (int r = 0; r < n_rows; ++r)
        for (int i = 0; i < bias.size; ++i)
            rows[static_cast<int64_t>(r) * bias.size + i] += bias.data[i];
}
}  // namespace

Status CpuForward::run(const ForwardBatch& batch, std::vector<float>& logits) {
    Status ran = run_pass(batch, logits);
    // Weights read as zeros once the model file shrank under its mapping (mapped_file.h): then
    // neither these logits nor an error about them (a NaN) mean anything.
    if (Status unchanged = MappedFile::check_unchanged(); !unchanged) return unchanged;
    return ran;
}

Status CpuForward::run_pass(const ForwardBatch& batch, std::vector<float>& logits) {
    const ModelConfig& c = config_;
    if (capture_) capture_->rows.clear();
    const int n = static_cast<int>(batch.tokens.size());
    const auto N = static_cast<size_t>(n);
    x_.resize(N * c.dim);
    xb_.resize(N * c.dim);
    q_.resize(N * c.q_dim());
    k_.resize(N * c.kv_dim());
    v_.resize(N * c.kv_dim());
    att_.resize(N * c.q_dim());
    hb_.resize(N * c.hidden_dim);
    hb2_.resize(N * c.hidden_dim);
    row_pos_.resize(N);
    row_chunk_.resize(N);
    row_slot_.resize(N);
    row_at_places_.resize(N);

    size_t row = 0;
    bool any_lanes = false;
    for (size_t ci = 0; ci < batch.chunks.size(); ++ci) {
        const SequenceChunk& ch = batch.chunks[ci];
        // With lanes the chunk's tokens take the slots after those in use (the scheduler has
        // appended them to the lanes already).
        int32_t first_slot = ch.lanes ? ch.lanes->slots - ch.num_tokens : ch.start_pos;
        any_lanes |= ch.lanes != nullptr;
        for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
            row_pos_[row] = ch.start_pos + i;
            row_slot_[row] = first_slot + i;
            row_chunk_[row] = static_cast<int32_t>(ci);
            row_at_places_[row] = ch.lanes && ch.lanes->cache_positions;
        }
    }
    if (any_lanes) row_stats_.assign(N * static_cast<size_t>(c.n_kv_heads), {});
    // The key slots each row's attention visits (the same in every layer).
    row_keys_.resize(N);
    times_ = {};
    for (size_t r = 0; r < N; ++r) {
        int keys = 0;
        for_each_key_span(batch.chunks[static_cast<size_t>(row_chunk_[r])], kv_.block_size(),
                          row_slot_[r] + 1, [&](int, int, int count) { keys += count; });
        row_keys_[r] = keys;
        times_.attention_key_slots += int64_t{keys} * c.n_kv_heads * c.n_layers;
    }
    // Each row's rotation angles, once for all its heads and layers: taken per head, the same
    // sines and cosines were worked out n_heads + n_kv_heads times per layer.
    rope_cos_sin_.resize(N * c.head_dim);
    int places = 0;  // place_cos_sin_'s rows: a row's places are below the keys it visits
    for (size_t r = 0; r < N; ++r) {
        if (row_at_places_[r]) {
            places = std::max(places, row_keys_[r]);
            continue;
        }
        rope_angles(row_pos_[r], inv_freq_.data(), c.head_dim / 2, &rope_cos_sin_[r * c.head_dim]);
        times_.rope_position_max = std::max(times_.rope_position_max, row_pos_[r]);
    }
    if (places > static_cast<int>(place_cos_sin_.size() / static_cast<size_t>(c.head_dim))) {
        const auto have = static_cast<int>(place_cos_sin_.size() / c.head_dim);
        place_cos_sin_.resize(static_cast<size_t>(places) * c.head_dim);
        for (int p = have; p < places; ++p)
            rope_angles(p, inv_freq_.data(), c.head_dim / 2,
                        &place_cos_sin_[static_cast<size_t>(p) * c.head_dim]);
    }

    const int64_t n64 = n, dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(),
                  hidden = c.hidden_dim;
    if (trace_) trace_->start_chain();
    op(
        OpKind::kEmbed, -1,
        [&] {
            for (int r = 0; r < n; ++r)
                weights_.token_embedding.row_to_f32(batch.tokens[static_cast<size_t>(r)],
                                                    &x_[static_cast<size_t>(r) * c.dim]);
        },
        [&] {
            KernelCost k = elementwise_cost(0, n64 * dim, 0);
            k.weight_bytes = n64 * weights_.token_embedding.row_bytes;  // one row per token
            return k;
        });

    // Where the activations first stop being finite, said in words a user can act on.
    auto check_finite = [&](const float* v, size_t count, size_t width, const std::string& where) {
        size_t i = first_nonfinite(v, count);
        if (i == count) return Status{};
        size_t r = i / width;
        return Status{Error{"the model produced " + std::string(std::isnan(v[i]) ? "NaN" : "Inf") +
                            " in " + where + " (token position " +
                            std::to_string(r < N ? row_pos_[r] : 0) +
                            "): its weights hold NaN or Inf, or overflow float32"}};
    };
    if (Status s = check_finite(x_.data(), N * c.dim, c.dim, "the token embedding"); !s) return s;

    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t).count();
    };
    // Row-wise ops over the pool too (each row's values are the same whoever computes them):
    // run alone they left the other threads spinning (a quarter of a 2-thread prefill of the
    // bundled model). `width` is a row's work in multiply-adds, roughly.
    auto for_rows = [&](int64_t width, auto&& row) {
        pool_.parallel_for(n, n64 * width, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                row(static_cast<int>(r));
        });
    };
    auto norm_rows = [&](const Vector& w) {
        for_rows(4 * dim, [&](int r) {
            rmsnorm(&xb_[static_cast<size_t>(r) * c.dim], &x_[static_cast<size_t>(r) * c.dim],
                    w.data, c.dim, c.rms_eps);
        });
    };
    auto norm_cost = [&](const Vector& w) {
        KernelCost k = elementwise_cost(n64 * dim, n64 * dim, 4);
        k.weight_bytes = w.bytes();
        return k;
    };
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
        auto t_attention = clock::now();
        op(
            OpKind::kAttnNorm, l, [&] { norm_rows(w.attn_norm); },
            [&] { return norm_cost(w.attn_norm); });
        op(
            OpKind::kQkv, l,
            [&] {
                matmul(pool_, xb_.data(), n, w.wq, q_.data(), matmul_mode_);
                matmul(pool_, xb_.data(), n, w.wk, k_.data(), matmul_mode_);
                matmul(pool_, xb_.data(), n, w.wv, v_.data(), matmul_mode_);
                add_bias(q_.data(), n, w.bq);
                add_bias(k_.data(), n, w.bk);
                add_bias(v_.data(), n, w.bv);
            },
            [&] {
                KernelCost k = matmul_cost(n64, q_dim, dim, w.wq.bytes());
                k += matmul_cost(n64, kv_dim, dim, w.wk.bytes());
                k += matmul_cost(n64, kv_dim, dim, w.wv.bytes());
                k.activation_bytes -= 2 * n64 * dim * 4;  // the input is read once
                k.weight_bytes += w.bq.bytes() + w.bk.bytes() + w.bv.bytes();
                return k;
            });

        op(
            OpKind::kRope, l,
            [&] {
                for_rows(8 * (q_dim + kv_dim), [&](int r) {
                    // At places: the key is stored as it is and rotated where it is read.
                    if (row_at_places_[static_cast<size_t>(r)]) return;
                    const float* cs = &rope_cos_sin_[static_cast<size_t>(r) * c.head_dim];
                    for (int h = 0; h < c.n_heads; ++h)
                        rope_rotate(&q_[static_cast<size_t>(r) * c.q_dim() +
                                        static_cast<size_t>(h) * c.head_dim],
                                    c.head_dim, cs, c.rope_style);
                    for (int h = 0; h < c.n_kv_heads; ++h)
                        rope_rotate(&k_[static_cast<size_t>(r) * c.kv_dim() +
                                        static_cast<size_t>(h) * c.head_dim],
                                    c.head_dim, cs, c.rope_style);
                });
            },
            [&] { return elementwise_cost(n64 * (q_dim + kv_dim), n64 * (q_dim + kv_dim), 6); });

        // Store this layer's K/V of every row through its block table.
        op(
            OpKind::kKvWrite, l,
            [&] {
                for (int r = 0; r < n; ++r) {
                    const SequenceChunk& chunk =
                        batch.chunks[static_cast<size_t>(row_chunk_[static_cast<size_t>(r)])];
                    const int at = row_slot_[static_cast<size_t>(r)];
                    BlockId block = chunk.table->blocks[static_cast<size_t>(at / kv_.block_size())];
                    int slot = at % kv_.block_size();
                    const float* kr = &k_[static_cast<size_t>(r) * c.kv_dim()];
                    kv_.write(l, block, slot, kr, &v_[static_cast<size_t>(r) * c.kv_dim()]);
                    if (chunk.lanes && chunk.lanes->want_key_norm)
                        for (int h = 0; h < c.n_kv_heads; ++h)
                            chunk.lanes->lane(l, h).key_norm[static_cast<size_t>(at)] = std::sqrt(
                                dot(kr + h * c.head_dim, kr + h * c.head_dim, c.head_dim));
                }
            },
            [&] {
                KernelCost k = elementwise_cost(2 * n64 * kv_dim, 0, 0);
                // K/V of the rows in this layer (all KV heads), scales included.
                k.kv_written_bytes = n64 * kv_.bytes_per_lane_token(l) * c.n_kv_heads;
                return k;
            });

        op(
            OpKind::kAttention, l,
            [&] {
                attention(batch, l);
                if (any_lanes) gather_lane_stats(batch, l);
            },
            [&] {
                KernelCost k = elementwise_cost(n64 * q_dim, n64 * q_dim, 0);
                k.kv_read_bytes = attention_kv_read_bytes(batch, l);
                for (size_t r = 0; r < N; ++r)  // QK and PV over the row's keys, every head
                    k.flops += 4 * static_cast<int64_t>(row_keys_[r]) * q_dim;
                return k;
            });

        op(
            OpKind::kAttnOutput, l,
            [&] {
                matmul(pool_, att_.data(), n, w.wo, xb_.data(), matmul_mode_);
                for (size_t i = 0; i < N * c.dim; ++i)
                    x_[i] += xb_[i];
            },
            [&] {
                KernelCost k = matmul_cost(n64, dim, q_dim, w.wo.bytes());
                k += elementwise_cost(2 * n64 * dim, n64 * dim, 1);
                return k;
            });
        times_.attention_ns += since(t_attention);

        auto t_mlp = clock::now();
        op(
            OpKind::kFfnNorm, l, [&] { norm_rows(w.ffn_norm); },
            [&] { return norm_cost(w.ffn_norm); });
        op(
            OpKind::kFfnGateUp, l,
            [&] {
                matmul(pool_, xb_.data(), n, w.w_gate, hb_.data(), matmul_mode_);
                matmul(pool_, xb_.data(), n, w.w_up, hb2_.data(), matmul_mode_);
            },
            [&] {
                KernelCost k = matmul_cost(n64, hidden, dim, w.w_gate.bytes());
                k += matmul_cost(n64, hidden, dim, w.w_up.bytes());
                k.activation_bytes -= n64 * dim * 4;  // the input is read once
                return k;
            });
        op(
            OpKind::kSwiglu, l,
            [&] {
                for_rows(16 * hidden, [&](int r) {
                    const size_t at = static_cast<size_t>(r) * c.hidden_dim;
                    swiglu(&hb_[at], &hb2_[at], c.hidden_dim);
                });
            },
            [&] { return elementwise_cost(2 * n64 * hidden, n64 * hidden, 5); });
        Status finite;
        op(
            OpKind::kFfnDown, l,
            [&] {
                matmul(pool_, hb_.data(), n, w.w_down, xb_.data(), matmul_mode_);
                for (size_t i = 0; i < N * c.dim; ++i)
                    x_[i] += xb_[i];
                finite = check_finite(x_.data(), N * c.dim, c.dim, "layer " + std::to_string(l));
            },
            [&] {
                KernelCost k = matmul_cost(n64, dim, hidden, w.w_down.bytes());
                k += elementwise_cost(2 * n64 * dim, n64 * dim, 1);
                return k;
            });
        times_.mlp_ns += since(t_mlp);
        if (!finite) return finite;
    }

    // Final norm and classifier, only for the rows whose logits are wanted.
    std::vector<float> last;
    int n_out = 0;
    op(
        OpKind::kOutputNorm, -1,
        [&] {
            size_t at = 0;
            for (const SequenceChunk& ch : batch.chunks) {
                size_t first = at;
                at += static_cast<size_t>(ch.num_tokens);
                if (!(ch.want_logits || ch.all_logits) || ch.num_tokens == 0) continue;
                for (size_t r = ch.all_logits ? first : at - 1; r < at; ++r) {
                    last.resize(static_cast<size_t>(n_out + 1) * c.dim);
                    rmsnorm(&last[static_cast<size_t>(n_out) * c.dim], &x_[r * c.dim],
                            weights_.output_norm.data, c.dim, c.rms_eps);
                    ++n_out;
                }
            }
        },
        [&] {
            KernelCost k = elementwise_cost(int64_t{n_out} * dim, int64_t{n_out} * dim, 4);
            k.weight_bytes = weights_.output_norm.bytes();
            return k;
        });
    logits.resize(static_cast<size_t>(n_out) * c.vocab_size);
    op(
        OpKind::kLmHead, -1,
        [&] {
            if (n_out > 0)
                matmul(pool_, last.data(), n_out, weights_.output, logits.data(), matmul_mode_);
        },
        [&] {
            return n_out > 0 ? matmul_cost(n_out, c.vocab_size, dim, weights_.output.bytes())
                             : KernelCost{};
        });
    size_t bad = first_nonfinite(logits.data(), logits.size());
    if (bad < logits.size())
        return Error{"the model produced " + std::string(std::isnan(logits[bad]) ? "NaN" : "Inf") +
                     " in its output layer (logits): its output weights or final norm hold NaN or "
                     "Inf, or overflow float32"};
    return {};
}

int64_t CpuForward::attention_kv_read_bytes(const ForwardBatch& batch, int layer) const {
    const ModelConfig& c = config_;
    int64_t held = 0;
    size_t row = 0;
    for (const SequenceChunk& ch : batch.chunks) {
        row += static_cast<size_t>(ch.num_tokens);
        if (ch.num_tokens == 0) continue;
        const int len = row_slot_[row - 1] + 1;
        for (int h = 0; h < c.n_kv_heads; ++h) {
            const LaneStats* lane = ch.lanes ? &ch.lanes->lane(layer, h) : nullptr;
            for_each_key_span(ch, kv_.block_size(), len, [&](int, int first, int count) {
                if (!lane) {
                    held += count;
                    return;
                }
                for (int s = first; s < first + count; ++s)
                    held += lane->position[static_cast<size_t>(s)] >= 0;
            });
        }
    }
    return held * kv_.bytes_per_lane_token(layer);
}

void CpuForward::attention(const ForwardBatch& batch, int layer) {
    const ModelConfig& c = config_;
    const int n = static_cast<int>(batch.tokens.size());
    const int hd = c.head_dim, group = c.group_size(), bs = kv_.block_size(), kv_dim = c.kv_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    int max_keys = 0;
    int64_t cost = 0;
    for (int keys : row_keys_) {
        max_keys = std::max(max_keys, keys);
        cost += static_cast<int64_t>(keys) * c.n_heads * hd * 2;
    }
    constexpr float kHole = -std::numeric_limits<float>::infinity();
    std::atomic<int32_t> place_max{-1};

    // One task per (row, KV head): the query heads that share a KV head read each key and
    // value once. Keys are visited block by block, so each block's slots are contiguous; a row's
    // scores are indexed in that order (key k of the row), over the blocks it visits only.
    pool_.parallel_for(
        static_cast<int64_t>(n) * c.n_kv_heads, cost, [&](int64_t begin, int64_t end) {
            std::vector<float> scores(static_cast<size_t>(group) * static_cast<size_t>(max_keys));
            // Quantized caches: one block of one KV head, dequantized ([slot][head_dim]).
            const bool in_place = kv_.reads_in_place(layer);
            std::vector<float> kbuf, vbuf;
            if (!in_place) {
                kbuf.resize(static_cast<size_t>(bs) * static_cast<size_t>(hd));
                vbuf.resize(kbuf.size());
            }
            // Cache positions: each visible key's place (by key k of the row, -1 for a hole),
            // the row's queries and one block's keys rotated to their places.
            std::vector<int32_t> key_place;
            std::vector<std::pair<int32_t, int32_t>> by_position;  // (position, key k)
            std::vector<float> q_at_place, k_at_place;
            for (int64_t task = begin; task < end; ++task) {
                // Rows taken 0, n-1, 1, n-2, ...: a prompt's later rows attend to more keys,
                // and contiguous shares of rows in order left the first thread idle (one third
                // of the work against two thirds, on two threads); pairs even it out.
                const int64_t u = task / c.n_kv_heads;
                auto r = static_cast<size_t>(u % 2 == 0 ? u / 2 : n - 1 - u / 2);
                const int kvh = static_cast<int>(task % c.n_kv_heads);
                const int pos = row_pos_[r];
                const int len = row_slot_[r] + 1;  // keys: slots 0 .. the row's own
                const int keys = row_keys_[r];     // those of them in blocks still held
                const SequenceChunk& chunk = batch.chunks[static_cast<size_t>(row_chunk_[r])];
                const BlockTable& table = *chunk.table;
                // Token eviction: slots the lane no longer holds score -inf (probability 0
                // exactly), and blocks given back are not visited at all.
                const LaneStats* lane = chunk.lanes ? &chunk.lanes->lane(layer, kvh) : nullptr;
                const float* q0 = &q_[r * c.q_dim() + static_cast<size_t>(kvh * group) * hd];
                const bool at_places = row_at_places_[r] != 0;
                if (at_places) {
                    // A key's place is its rank by position among the keys the lane keeps and
                    // the row sees (compaction moves tokens out of position order); the query
                    // is the newest of them.
                    key_place.assign(static_cast<size_t>(keys), -1);
                    by_position.clear();
                    int k = 0;
                    for_each_key_span(chunk, bs, len, [&](int, int t0, int span) {
                        for (int t = t0; t < t0 + span; ++t, ++k)
                            if (int32_t p = lane->position[static_cast<size_t>(t)]; p >= 0)
                                by_position.emplace_back(p, k);
                    });
                    if (!std::is_sorted(by_position.begin(), by_position.end()))
                        std::sort(by_position.begin(), by_position.end());
                    for (size_t i = 0; i < by_position.size(); ++i)
                        key_place[static_cast<size_t>(by_position[i].second)] =
                            static_cast<int32_t>(i);
                    const auto query_place = static_cast<int32_t>(by_position.size()) - 1;
                    q_at_place.assign(q0, q0 + static_cast<size_t>(group) * hd);
                    for (int g = 0; g < group; ++g)
                        rope_rotate(&q_at_place[static_cast<size_t>(g) * hd], hd,
                                    &place_cos_sin_[static_cast<size_t>(query_place) * hd],
                                    c.rope_style);
                    q0 = q_at_place.data();
                    for (int32_t seen = place_max.load(std::memory_order_relaxed);
                         query_place > seen &&
                         !place_max.compare_exchange_weak(seen, query_place);) {
                    }
                    k_at_place.resize(static_cast<size_t>(bs) * hd);
                }
                const int kv_off = kvh * hd;
                int k0 = 0;  // the block's first key in the row's scores
                for_each_key_span(chunk, bs, len, [&](int blk, int t0, int span) {
                    const BlockId block = table.blocks[static_cast<size_t>(blk)];
                    // f32 is read in place (stride kv_dim); other dtypes are dequantized once
                    // per block (stride head_dim) and scored the same way.
                    const float* kb;
                    size_t stride;
                    if (in_place) {
                        kb = kv_.key(layer, block, 0) + kv_off;
                        stride = static_cast<size_t>(kv_dim);
                    } else {
                        kv_.read_lane(layer, block, kvh, span, kbuf.data(), nullptr);
                        kb = kbuf.data();
                        stride = static_cast<size_t>(hd);
                    }
                    if (at_places) {
                        for (int s = 0; s < span; ++s) {
                            const int32_t place = key_place[static_cast<size_t>(k0 + s)];
                            if (place < 0) continue;  // a hole: scored -inf below
                            float* to = &k_at_place[static_cast<size_t>(s) * hd];
                            std::copy_n(kb + static_cast<size_t>(s) * stride, hd, to);
                            rope_rotate(to, hd, &place_cos_sin_[static_cast<size_t>(place) * hd],
                                        c.rope_style);
                        }
                        kb = k_at_place.data();
                        stride = static_cast<size_t>(hd);
                    }
                    const int32_t* held = lane ? &lane->position[static_cast<size_t>(t0)] : nullptr;
                    for (int g = 0; g < group; ++g) {
                        float* sg = &scores[static_cast<size_t>(g) * keys + k0];
                        const float* q = q0 + g * hd;
                        for (int s = 0; s < span; ++s)
                            sg[s] = held && held[s] < 0
                                        ? kHole
                                        : dot(q, kb + static_cast<size_t>(s) * stride, hd) * scale;
                    }
                    k0 += span;
                });
                std::vector<float>* stats =
                    chunk.lanes ? &row_stats_[r * static_cast<size_t>(c.n_kv_heads) +
                                              static_cast<size_t>(kvh)]
                                : nullptr;
                if (stats) stats->assign(static_cast<size_t>(keys), 0.0f);
                for (int g = 0; g < group; ++g) {
                    float* probs = &scores[static_cast<size_t>(g) * keys];
                    softmax(probs, keys);
                    if (stats)
                        for (int k = 0; k < keys; ++k)
                            (*stats)[static_cast<size_t>(k)] += probs[k];
                    const int head = kvh * group + g;
                    if (capture_ &&
                        capture_->wanted[static_cast<size_t>(layer * c.n_heads + head)]) {
                        // Quantized here, in the worker, so the lock guards only a move. A row is
                        // over key positions 0..pos; with lanes, slots map to their positions.
                        std::vector<uint8_t> q8(static_cast<size_t>(pos + 1), 0);
                        int k = 0;
                        for_each_key_span(chunk, bs, len, [&](int, int t0, int span) {
                            for (int t = t0; t < t0 + span; ++t, ++k) {
                                int at = lane ? lane->position[static_cast<size_t>(t)] : t;
                                if (at >= 0)
                                    q8[static_cast<size_t>(at)] = quantize_probability(probs[k]);
                            }
                        });
                        std::lock_guard lock(capture_mutex_);
                        capture_->rows.push_back({row_chunk_[r], pos, layer, head, std::move(q8)});
                    }
                }
                float* out0 = &att_[r * c.q_dim() + static_cast<size_t>(kvh * group) * hd];
                std::fill(out0, out0 + static_cast<size_t>(group) * hd, 0.0f);
                k0 = 0;
                for_each_key_span(chunk, bs, len, [&](int blk, int t0, int span) {
                    const BlockId block = table.blocks[static_cast<size_t>(blk)];
                    const float* vb;
                    size_t stride;
                    if (in_place) {
                        vb = kv_.value(layer, block, 0) + kv_off;
                        stride = static_cast<size_t>(kv_dim);
                    } else {
                        kv_.read_lane(layer, block, kvh, span, nullptr, vbuf.data());
                        vb = vbuf.data();
                        stride = static_cast<size_t>(hd);
                    }
                    for (int g = 0; g < group; ++g) {
                        const float* pg = &scores[static_cast<size_t>(g) * keys + k0];
                        float* out = out0 + g * hd;
                        for (int s = 0; s < span; ++s) {
                            if (lane && lane->position[static_cast<size_t>(t0 + s)] < 0) continue;
                            const float* v = vb + static_cast<size_t>(s) * stride;
                            const float a = pg[s];
                            for (int i = 0; i < hd; ++i)
                                out[i] += a * v[i];
                        }
                    }
                    k0 += span;
                });
            }
        });
    times_.rope_position_max = std::max(times_.rope_position_max, place_max.load());
}

void CpuForward::gather_lane_stats(const ForwardBatch& batch, int layer) {
    const ModelConfig& c = config_;
    const auto n_kv = static_cast<size_t>(c.n_kv_heads);
    const int bs = kv_.block_size();
    size_t row = 0;
    for (const SequenceChunk& ch : batch.chunks) {
        const size_t first = row;
        row += static_cast<size_t>(ch.num_tokens);
        SequenceLanes* lanes = ch.lanes;
        if (!lanes || ch.num_tokens == 0) continue;
        // Row order, whatever thread computed each row: the same sums on every run. A row's
        // statistics are over the keys it visited (key k of its attention), in slot order.
        for (size_t r = first; r < row; ++r) {
            const bool observed = lanes->want_observed && row_pos_[r] >= lanes->observe_from;
            if (!lanes->want_accumulated && !observed) continue;
            for (size_t kvh = 0; kvh < n_kv; ++kvh) {
                const std::vector<float>& st = row_stats_[r * n_kv + kvh];
                LaneStats& lane = lanes->lane(layer, static_cast<int32_t>(kvh));
                size_t k = 0;
                for_each_key_span(ch, bs, row_slot_[r] + 1, [&](int, int t0, int span) {
                    for (auto s = static_cast<size_t>(t0); s < static_cast<size_t>(t0 + span);
                         ++s, ++k) {
                        if (lanes->want_accumulated) lane.accumulated[s] += st[k];
                        if (observed) lane.observed[s] += st[k];
                    }
                });
            }
        }
        if (lanes->window_rows > 0) {
            // morphkv's ring: each of the chunk's last R queries overwrites the row of the query
            // R positions before it. It writes every held slot up to its own, which covers every
            // slot the older row could have written (its keys were older; slots given back or
            // evicted since were cleared), so the row needs no clearing first.
            const int32_t ring = lanes->window_rows;
            const int32_t newest = row_pos_[row - 1];
            for (size_t r = first; r < row; ++r) {
                const int32_t pos = row_pos_[r];
                if (pos <= newest - ring) continue;
                const auto at = static_cast<size_t>(pos % ring);
                for (size_t kvh = 0; kvh < n_kv; ++kvh) {
                    const std::vector<float>& st = row_stats_[r * n_kv + kvh];
                    LaneStats& lane = lanes->lane(layer, static_cast<int32_t>(kvh));
                    lane.window_query[at] = pos;
                    std::vector<float>& dst = lane.window_rows[at];
                    size_t k = 0;
                    for_each_key_span(ch, bs, row_slot_[r] + 1, [&](int, int t0, int span) {
                        std::copy_n(st.begin() + static_cast<long>(k), span, dst.begin() + t0);
                        k += static_cast<size_t>(span);
                    });
                }
            }
        }
        if (lanes->want_current) {
            // The newest query's attention, averaged over every head of the layer.
            const size_t last = row - 1;
            const size_t keys = row_stats_[last * n_kv].size();
            std::vector<float> mean(keys, 0.0f);
            for (size_t kvh = 0; kvh < n_kv; ++kvh)
                for (size_t k = 0; k < keys; ++k)
                    mean[k] += row_stats_[last * n_kv + kvh][k];
            for (float& m : mean)
                m /= static_cast<float>(c.n_heads);
            for (size_t kvh = 0; kvh < n_kv; ++kvh) {
                LaneStats& lane = lanes->lane(layer, static_cast<int32_t>(kvh));
                size_t k = 0;
                for_each_key_span(ch, bs, row_slot_[last] + 1, [&](int, int t0, int span) {
                    std::copy_n(mean.begin() + static_cast<long>(k), span,
                                lane.current.begin() + t0);
                    k += static_cast<size_t>(span);
                });
            }
        }
    }
}

}  // namespace kvscope
