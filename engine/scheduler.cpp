#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "engine/tokenizer.h"

namespace kvscope {

namespace {
using clock = std::chrono::steady_clock;
double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
}
}  // namespace

Scheduler::Scheduler(Engine& engine, const ServingOptions& options, std::vector<Request> requests)
    : engine_(engine), options_(options), requests_(std::move(requests)) {
    if (options_.allocator == Allocator::kContiguous) options_.prefix_cache = false;
    if (!options_.kv_cache) {
        // A sequence cut into chunks would never finish: each step throws away what the last
        // computed. Blocks from another sequence's prompt would be a cache by another name.
        options_.prefix_cache = false;
        options_.max_running = 1;
        options_.max_batch_tokens =
            std::max(options_.max_batch_tokens, engine_.config().context_length);
    }
    if (options_.swap_blocks <= 0) options_.swap_blocks = engine_.options().num_blocks;
    arrival_order_.resize(requests_.size());
    std::iota(arrival_order_.begin(), arrival_order_.end(), 0);
    std::stable_sort(arrival_order_.begin(), arrival_order_.end(), [&](size_t a, size_t b) {
        return requests_[a].arrival_step < requests_[b].arrival_step;
    });
    totals_.requests = static_cast<int32_t>(requests_.size());
}

void Scheduler::add_request(Request r) {
    r.arrival_step = std::max(r.arrival_step, step_);
    requests_.push_back(std::move(r));
    size_t index = requests_.size() - 1;
    // Keep the not-yet-arrived part of the queue ordered by arrival step.
    auto pos = std::upper_bound(
        arrival_order_.begin() + static_cast<long>(next_arrival_), arrival_order_.end(), index,
        [&](size_t a, size_t b) { return requests_[a].arrival_step < requests_[b].arrival_step; });
    arrival_order_.insert(pos, index);
    ++totals_.requests;
}

std::vector<const Request*> Scheduler::not_arrived() const {
    std::vector<const Request*> out;
    for (size_t i = next_arrival_; i < arrival_order_.size(); ++i)
        out.push_back(&requests_[arrival_order_[i]]);
    return out;
}

bool Scheduler::done() const {
    return next_arrival_ == arrival_order_.size() && running_.empty() && waiting_.empty() &&
           swapped_.empty();
}

int32_t Scheduler::reservation_tokens(const Sequence& s) const {
    return std::min(s.prompt_len + s.max_tokens, engine_.config().context_length);
}

void Scheduler::admit_arrivals() {
    const Reporter& rep = engine_.reporter();
    const Tokenizer* tok = engine_.model().tokenizer.get();
    const int32_t bs = engine_.options().block_size;
    while (next_arrival_ < arrival_order_.size() &&
           requests_[arrival_order_[next_arrival_]].arrival_step <= step_) {
        auto ri = static_cast<int32_t>(arrival_order_[next_arrival_++]);
        const Request& r = requests_[static_cast<size_t>(ri)];
        int32_t parent = -1;
        for (int32_t k = 0; k < r.n; ++k) {
            Sequence s;
            s.index = static_cast<int32_t>(seqs_.size());
            s.request = ri;
            s.sample = k;
            s.name = k == 0 ? r.id : r.id + "#" + std::to_string(k);
            s.tokens = r.prompt;
            s.prompt_len = static_cast<int32_t>(r.prompt.size());
            s.max_tokens = r.max_tokens;
            SamplingParams sp = r.sampling;
            sp.seed += static_cast<uint64_t>(k);
            s.sampler = Sampler(engine_.config().vocab_size, sp);
            if (rep.on()) {
                Event e;
                e.kind = EventKind::kRequestArrive;
                e.request = s.index;
                e.a = s.prompt_len;
                e.b = s.max_tokens;
                e.c = r.n;
                e.text = s.name;
                rep.emit(std::move(e));
                for (int32_t p = 0; p < s.prompt_len; ++p) {
                    Event t;
                    t.kind = EventKind::kToken;
                    t.request = s.index;
                    t.a = p;
                    t.b = s.tokens[static_cast<size_t>(p)];
                    t.c = 1;
                    if (tok) t.text = tok->decode_token(t.b);
                    rep.emit(std::move(t));
                }
            }
            // A request that could never fit is rejected alone; the rest still run.
            int32_t need_tokens = options_.allocator == Allocator::kContiguous
                                      ? reservation_tokens(s)
                                      : std::min(s.prompt_len + std::max(s.max_tokens, 1),
                                                 engine_.config().context_length);
            int32_t need_blocks = BlockManager::blocks_for(need_tokens, bs);
            bool too_long = s.prompt_len > engine_.config().context_length;
            if (too_long || need_blocks > engine_.options().num_blocks) {
                s.state = SequenceState::kRejected;
                ++totals_.rejected;
                std::string why = too_long
                                      ? "its prompt of " + std::to_string(s.prompt_len) +
                                            " tokens is longer than the model's context (" +
                                            std::to_string(engine_.config().context_length) + ")"
                                      : "it needs " + std::to_string(need_blocks) +
                                            " blocks and the whole pool holds " +
                                            std::to_string(engine_.options().num_blocks);
                totals_.rejected_reasons[s.name] = why;
                if (rep.on()) {
                    Event e;
                    e.kind = EventKind::kRequestReject;
                    e.request = s.index;
                    e.a = need_blocks;
                    e.b = engine_.options().num_blocks;
                    e.text = std::move(why);
                    rep.emit(std::move(e));
                }
                seqs_.push_back(std::move(s));
                continue;
            }
            bool forks = k > 0 && options_.allocator == Allocator::kPaged && parent >= 0;
            if (forks) {
                children_[parent].push_back(s.index);
            } else {
                waiting_.push_back(s.index);
                if (k == 0) parent = s.index;
            }
            seqs_.push_back(std::move(s));
        }
    }
}

void Scheduler::preempt(Sequence& s) {
    const Reporter& rep = engine_.reporter();
    BlockManager& bm = engine_.blocks();
    auto blocks = static_cast<int32_t>(s.table.blocks.size());
    bool swap = options_.preempt == PreemptMode::kSwap && s.computed > 0 && !s.lanes &&
                host_blocks_used_ + blocks <= options_.swap_blocks;
    running_.erase(std::find(running_.begin(), running_.end(), s.index));
    ++s.preemptions;
    ++totals_.preemptions;
    if (rep.on()) {
        Event e;
        e.kind = EventKind::kPreempt;
        e.request = s.index;
        e.a = static_cast<int32_t>(swap ? PreemptMode::kSwap : PreemptMode::kRecompute);
        e.b = blocks;
        rep.emit(std::move(e));
    }
    if (swap) {
        s.host_blocks.resize(static_cast<size_t>(blocks));
        for (int32_t i = 0; i < blocks; ++i)
            engine_.kv_blocks().save_block(s.table.blocks[static_cast<size_t>(i)],
                                           s.host_blocks[static_cast<size_t>(i)]);
        host_blocks_used_ += blocks;
        ++totals_.swaps_out;
        int32_t tokens = s.table.num_tokens;
        bm.free(s.table, s.index);
        s.table.num_tokens = tokens;  // remembered for swap-in; no blocks held
        s.state = SequenceState::kSwapped;
        swapped_.push_back(s.index);
        report_swap(EventKind::kSwapOut, s, blocks);
    } else {
        bm.free(s.table, s.index);
        s.computed = 0;
        s.lanes.reset();  // recomputed from the start, evicting afresh
        s.state = SequenceState::kWaiting;
        waiting_.insert(waiting_.begin(), s.index);
    }
}

void Scheduler::report_swap(EventKind kind, const Sequence& s, int32_t blocks) {
    const Reporter& rep = engine_.reporter();
    if (!rep.on()) return;
    Event e;
    e.kind = kind;
    e.request = s.index;
    e.a = blocks;
    e.wide = static_cast<int64_t>(blocks) * static_cast<int64_t>(engine_.kv().bytes_per_block());
    rep.emit(std::move(e));
}

bool Scheduler::try_swap_in(Sequence& s) {
    BlockManager& bm = engine_.blocks();
    int32_t tokens = s.table.num_tokens;
    auto blocks = static_cast<int32_t>(s.host_blocks.size());
    if (blocks > bm.pool().num_free()) return false;
    BlockTable t;
    if (!bm.grow(t, tokens, s.index).ok()) return false;
    for (int32_t i = 0; i < blocks; ++i)
        engine_.kv_blocks().load_block(t.blocks[static_cast<size_t>(i)],
                                       s.host_blocks[static_cast<size_t>(i)]);
    host_blocks_used_ -= blocks;
    s.host_blocks.clear();
    s.table = std::move(t);
    s.state = SequenceState::kRunning;
    report_swap(EventKind::kSwapIn, s, blocks);
    return true;
}

bool Scheduler::ensure_room(Sequence& s, int32_t new_tokens, bool& preempted_self) {
    BlockManager& bm = engine_.blocks();
    preempted_self = false;
    while (!bm.can_grow(s.table, new_tokens)) {
        // Preempt the newest running sequence; if that is this one, it gives way itself.
        int32_t victim = running_.back();
        preempt(seqs_[static_cast<size_t>(victim)]);
        if (victim == s.index) {
            preempted_self = true;
            return false;
        }
    }
    return bm.grow(s.table, new_tokens, s.index).ok();
}

void Scheduler::report_admit(const Sequence& s, int32_t cached_tokens) {
    const Reporter& rep = engine_.reporter();
    if (!rep.on()) return;
    Event e;
    e.kind = EventKind::kRequestAdmit;
    e.request = s.index;
    e.a = cached_tokens;
    e.b = s.preemptions > 0 ? 1 : 0;
    rep.emit(std::move(e));
}

bool Scheduler::try_admit(Sequence& s, int32_t budget, int32_t& scheduled) {
    BlockManager& bm = engine_.blocks();
    const auto total = static_cast<int32_t>(s.tokens.size());
    if (options_.allocator == Allocator::kContiguous) {
        if (!bm.reserve_contiguous(s.table, reservation_tokens(s), s.index).ok()) return false;
    } else if (options_.prefix_cache && !options_.evictor) {
        int32_t reused = bm.reuse_cached_prefix(s.table, s.tokens, s.index);
        if (!s.counted_prefix) {
            prefix_reused_ += reused;
            prefix_total_ += s.prompt_len;
            totals_.prompt_tokens += s.prompt_len;
            s.counted_prefix = true;
        }
        s.computed = reused;
    }
    if (!s.counted_prefix) {
        prefix_total_ += s.prompt_len;
        totals_.prompt_tokens += s.prompt_len;
        s.counted_prefix = true;
    }
    int32_t chunk = std::min(total - s.computed, budget);
    if (options_.evictor) chunk = options_.evictor->chunk_within_budget(nullptr, s.computed, chunk);
    if (chunk <= 0 || !bm.can_grow(s.table, s.computed + chunk)) {
        bm.free(s.table, s.index);
        s.computed = 0;
        return false;
    }
    (void)bm.grow(s.table, s.computed + chunk, s.index);
    if (options_.evictor)
        s.lanes = *options_.evictor->new_lanes(
            engine_.config().n_layers, engine_.config().n_kv_heads, bm.block_size(), s.prompt_len);
    scheduled = chunk;
    s.state = SequenceState::kRunning;
    report_admit(s, s.computed);
    return true;
}

void Scheduler::forget_cache(Sequence& s) {
    engine_.blocks().free(s.table, s.index);
    s.computed = 0;
}

bool Scheduler::schedule(ForwardBatch& batch, std::vector<int32_t>& chunk_seq) {
    int32_t budget = options_.max_batch_tokens;
    bool preempted = false;
    // Without a cache, what the last step wrote is given up now: this step recomputes it all.
    if (!options_.kv_cache)
        for (int32_t si : running_)
            forget_cache(seqs_[static_cast<size_t>(si)]);
    auto add_chunk = [&](Sequence& s, int32_t n) {
        SequenceChunk chunk{&s.table, s.computed, n,
                            s.computed + n == static_cast<int32_t>(s.tokens.size())};
        if (s.lanes) {
            s.lanes->append(s.computed, n);
            chunk.lanes = &*s.lanes;
        }
        batch.chunks.push_back(chunk);
        batch.tokens.insert(batch.tokens.end(), s.tokens.begin() + s.computed,
                            s.tokens.begin() + s.computed + n);
        chunk_seq.push_back(s.index);
        budget -= n;
    };
    // 1. Running sequences: a decode token each, or their next prefill chunk.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence& s = seqs_[static_cast<size_t>(running_[i])];
        int32_t n = std::min(static_cast<int32_t>(s.tokens.size()) - s.computed, budget);
        if (s.lanes) n = options_.evictor->chunk_within_budget(&*s.lanes, s.computed, n);
        bool self = false;
        if (ensure_room(s, s.slots_used() + n, self)) {
            add_chunk(s, n);
            ++i;
        } else {
            preempted = true;
            if (self) break;
        }
    }
    // 2. Swapped sequences come back before new ones, when nothing was preempted just now.
    while (!preempted && !swapped_.empty() && budget > 0 &&
           static_cast<int32_t>(running_.size()) < options_.max_running) {
        Sequence& s = seqs_[static_cast<size_t>(swapped_.front())];
        if (!try_swap_in(s)) break;
        swapped_.erase(swapped_.begin());
        running_.push_back(s.index);
        int32_t n = static_cast<int32_t>(s.tokens.size()) - s.computed;
        if (n > budget || !engine_.blocks().can_grow(s.table, s.computed + n)) continue;
        (void)engine_.blocks().grow(s.table, s.computed + n, s.index);
        add_chunk(s, n);
    }
    // 3. Waiting sequences, FCFS: the head blocks the rest when it does not fit.
    while (!preempted && swapped_.empty() && !waiting_.empty() && budget > 0 &&
           static_cast<int32_t>(running_.size()) < options_.max_running) {
        Sequence& s = seqs_[static_cast<size_t>(waiting_.front())];
        int32_t n = 0;
        if (!try_admit(s, budget, n)) break;
        waiting_.erase(waiting_.begin());
        running_.push_back(s.index);
        add_chunk(s, n);
    }
    return !batch.chunks.empty();
}

void Scheduler::append_token(Sequence& s, int32_t token) {
    const Reporter& rep = engine_.reporter();
    if (s.generated() >= s.max_tokens) {  // max_tokens 0: the prompt is only prefilled
        finish(s, FinishReason::kLength);
        return;
    }
    if (token == engine_.config().eos_token) {
        finish(s, FinishReason::kEndToken);
        return;
    }
    s.tokens.push_back(token);
    if (rep.on()) {
        Event t;
        t.kind = EventKind::kToken;
        t.request = s.index;
        t.a = static_cast<int32_t>(s.tokens.size()) - 1;
        t.b = token;
        if (const Tokenizer* tok = engine_.model().tokenizer.get())
            t.text = tok->decode_token(token);
        rep.emit(std::move(t));
    }
    if (on_token_) on_token_(s, token);
    if (s.generated() >= s.max_tokens)
        finish(s, FinishReason::kLength);
    else if (static_cast<int32_t>(s.tokens.size()) >= engine_.config().context_length)
        finish(s, FinishReason::kContextFull);
}

void Scheduler::finish(Sequence& s, FinishReason why) {
    engine_.blocks().free(s.table, s.index);
    s.state = SequenceState::kFinished;
    s.finish = why;
    s.finished_step = step_;
    auto it = std::find(running_.begin(), running_.end(), s.index);
    if (it != running_.end()) running_.erase(it);
    const Reporter& rep = engine_.reporter();
    if (rep.on()) {
        Event e;
        e.kind = EventKind::kRequestFinish;
        e.request = s.index;
        e.a = s.generated();
        e.b = static_cast<int32_t>(why);
        rep.emit(std::move(e));
    }
}

void Scheduler::fork_children(Sequence& parent, const float* logits) {
    auto it = children_.find(parent.index);
    if (it == children_.end()) return;
    std::vector<float> copy(logits, logits + engine_.config().vocab_size);
    for (int32_t ci : it->second) {
        Sequence& c = seqs_[static_cast<size_t>(ci)];
        engine_.blocks().fork(parent.table, c.table, c.index);
        c.computed = parent.computed;
        c.lanes = parent.lanes;
        c.counted_prefix = true;
        c.state = SequenceState::kRunning;
        running_.push_back(c.index);
        report_admit(c, c.computed);
        std::vector<float> l = copy;
        append_token(c, c.sampler.sample(l.data()));
    }
    children_.erase(it);
}

bool Scheduler::step() {
    Reporter& rep = engine_.reporter();
    if (rep.on() && rep.probe->failed()) {
        stopped_by_probe_ = true;
        return false;
    }
    rep.step = step_;
    auto t_schedule = clock::now();
    const bool tracing = rep.on() && options_.trace_ops;
    trace_.spans.clear();
    trace_.device_events.clear();
    trace_.threads = engine_.threads().num_threads();
    const int64_t schedule_start = tracing ? host_now_ns() : 0;
    admit_arrivals();
    ForwardBatch batch;
    std::vector<int32_t> chunk_seq;
    bool any = schedule(batch, chunk_seq);
    double schedule_s = seconds_since(t_schedule);
    if (tracing) trace_.add(OpKind::kSchedule, -1, schedule_start, {});
    if (!any) {
        if (done()) return false;
        compute_metrics();
        // Nothing runnable yet. When nothing is in flight at all, nothing can happen before the
        // next request arrives: jump to it rather than step (and record) every idle iteration
        // of a gap that may be millions of steps long.
        bool idle = running_.empty() && waiting_.empty() && swapped_.empty() && children_.empty();
        if (idle && next_arrival_ < arrival_order_.size())
            step_ = std::max(step_ + 1, requests_[arrival_order_[next_arrival_]].arrival_step);
        else
            ++step_;
        ++steps_run_;
        return true;
    }
    // Decode chunks are single tokens of sequences that have generated before; the rest is
    // prefill (first admission, recompute after preemption, or a prompt chunk).
    int32_t prefill_tokens = 0;
    for (size_t i = 0; i < batch.chunks.size(); ++i) {
        const Sequence& s = seqs_[static_cast<size_t>(chunk_seq[i])];
        bool decode =
            batch.chunks[i].num_tokens == 1 && s.generated() > 0 && batch.chunks[i].want_logits;
        if (!decode) prefill_tokens += batch.chunks[i].num_tokens;
    }
    totals_.prefill_tokens_computed += prefill_tokens;
    emit_step_begin(batch, prefill_tokens);

    auto t_forward = clock::now();
    bool capture = rep.on() && !options_.capture_attention.empty();
    if (capture) capture_.wanted = options_.capture_attention;
    engine_.forward().set_capture(capture ? &capture_ : nullptr);
    engine_.forward().set_trace(tracing ? &trace_ : nullptr);
    Status ran = engine_.forward().run(batch, logits_);
    engine_.forward().set_capture(nullptr);
    engine_.forward().set_trace(nullptr);
    if (!ran) {
        error_ = ran;  // nothing sampled from garbage; the run ends here
        return false;
    }
    double forward_s = seconds_since(t_forward);
    if (capture) report_attention(chunk_seq);

    auto t_sample = clock::now();
    double sample_s = 0;  // the samplers alone, out of the loop's time
    const int64_t sample_start = tracing ? host_now_ns() : 0;
    int64_t sampled = 0;
    size_t logit_row = 0;
    const int vocab = engine_.config().vocab_size;
    for (size_t i = 0; i < batch.chunks.size(); ++i) {
        Sequence& s = seqs_[static_cast<size_t>(chunk_seq[i])];
        s.computed += batch.chunks[i].num_tokens;
        if (options_.prefix_cache && !s.lanes)
            engine_.blocks().register_full_blocks(s.table, s.tokens, s.computed);
        if (!batch.chunks[i].want_logits) continue;
        float* l = logits_.data() + logit_row++ * static_cast<size_t>(vocab);
        if (s.generated() == 0) fork_children(s, l);
        auto t0 = clock::now();
        int32_t token = s.sampler.sample(l);
        sample_s += seconds_since(t0);
        ++sampled;
        append_token(s, token);
    }
    if (tracing) {  // the samplers read each logit row once
        KernelCost k;
        k.activation_bytes = sampled * vocab * static_cast<int64_t>(sizeof(float));
        trace_.add(OpKind::kSample, -1, sample_start, k);
    }
    const int64_t evict_start = tracing ? host_now_ns() : 0;
    // Token eviction: each sequence that ran keeps every lane within its budget.
    for (int32_t si : chunk_seq) {
        Sequence& s = seqs_[static_cast<size_t>(si)];
        if (s.lanes && s.state == SequenceState::kRunning)
            totals_.tokens_evicted +=
                options_.evictor->after_step(*s.lanes, s.table, s.computed, s.prompt_len, s.index,
                                             engine_.blocks(), engine_.kv_blocks(), rep);
    }
    if (tracing && options_.evictor) trace_.add(OpKind::kEvict, -1, evict_start, {});
    schedule_s += seconds_since(t_sample) - sample_s;
    // The step's wall time, before any of its spans are reported.
    const double step_s = seconds_since(t_schedule);
    totals_.schedule_seconds += schedule_s;
    totals_.forward_seconds += forward_s;
    totals_.max_running = std::max(totals_.max_running, static_cast<int32_t>(running_.size()));

    compute_metrics();
    if (rep.on()) {
        report_ops();
        auto phase = [&](Phase p, double s) {
            Event e;
            e.kind = EventKind::kPhase;
            e.a = static_cast<int32_t>(p);
            e.wide = static_cast<int64_t>(s * 1e9);
            rep.emit(std::move(e));
        };
        phase(Phase::kSchedule, schedule_s);
        phase(prefill_tokens > 0 ? Phase::kPrefill : Phase::kDecode, forward_s);
        const auto& parts = engine_.forward().last_phase_times();  // inside the forward pass
        phase(Phase::kAttention, static_cast<double>(parts.attention_ns) * 1e-9);
        phase(Phase::kMlp, static_cast<double>(parts.mlp_ns) * 1e-9);
        phase(Phase::kSample, sample_s);
        Event e;
        e.kind = EventKind::kStepEnd;
        e.a = static_cast<int32_t>(running_.size());
        e.b = static_cast<int32_t>(waiting_.size());
        e.c = static_cast<int32_t>(swapped_.size());
        e.value = step_s;
        rep.emit(std::move(e));
    }
    ++step_;
    ++steps_run_;
    return true;
}

void Scheduler::report_ops() {
    const Reporter& rep = engine_.reporter();
    std::vector<Event>& events = op_events_;
    events.clear();
    for (const OpSpan& span : trace_.spans) {
        Event& e = events.emplace_back();
        e.kind = EventKind::kKernel;
        e.t_ns = span.start_ns;
        e.a = span.layer;
        e.b = trace_.threads;
        e.c = 0;  // the host thread: ops fork and join over the pool
        e.wide = span.end_ns - span.start_ns;
        e.text = std::string(op_name(span.kind));
        e.cost = span.cost;
    }
    for (Event& e : trace_.device_events)
        events.push_back(std::move(e));
    trace_.device_events.clear();
    rep.emit_all(events);
}

void Scheduler::report_attention(const std::vector<int32_t>& chunk_seq) {
    // Worker threads append rows in any order; events go out in a fixed one.
    auto& rows = capture_.rows;
    std::sort(rows.begin(), rows.end(),
              [](const AttentionCapture::Row& a, const AttentionCapture::Row& b) {
                  return std::tie(a.chunk, a.query_pos, a.layer, a.head) <
                         std::tie(b.chunk, b.query_pos, b.layer, b.head);
              });
    const Reporter& rep = engine_.reporter();
    for (const auto& row : rows) {
        // Without a cache every step recomputes the rows of the earlier tokens, bit for bit the
        // rows reported when they were new: only the newest goes out, so the heatmap is the
        // cached run's and the session does not grow with the square of the text.
        const Sequence& s = seqs_[static_cast<size_t>(chunk_seq[static_cast<size_t>(row.chunk)])];
        if (!options_.kv_cache && s.generated() > 0 &&
            row.query_pos < static_cast<int32_t>(s.tokens.size()) - 1)
            continue;
        Event e;
        e.kind = EventKind::kAttentionRow;
        e.request = chunk_seq[static_cast<size_t>(row.chunk)];
        e.a = row.layer;
        e.b = row.head;
        e.c = row.query_pos;
        e.payload = std::move(row.probs);
        rep.emit(std::move(e));
    }
    rows.clear();
}

void Scheduler::emit_step_begin(const ForwardBatch& batch, int32_t prefill_tokens) {
    const Reporter& rep = engine_.reporter();
    if (!rep.on()) return;
    Event e;
    e.kind = EventKind::kStepBegin;
    e.a = static_cast<int32_t>(batch.chunks.size());
    e.b = prefill_tokens;
    e.c = static_cast<int32_t>(batch.tokens.size()) - prefill_tokens;
    rep.emit(std::move(e));
}

void Scheduler::compute_metrics() {
    const BlockManager& bm = engine_.blocks();
    const BlockPool& pool = bm.pool();
    const int32_t bs = bm.block_size();
    const double slots = static_cast<double>(pool.num_blocks()) * bs;
    // Fill of each block the running sequences hold: the most tokens any holder keeps in it.
    // Only their blocks are visited (with lanes, only those not given back): a step costs what
    // is held, not the pool's size or a sequence's position.
    std::unordered_map<BlockId, int32_t> fill;
    for (int32_t si : running_) {
        const Sequence& s = seqs_[static_cast<size_t>(si)];
        const BlockTable& t = s.table;
        auto visit = [&](int32_t i) {
            int32_t in_block = std::clamp(t.num_tokens - i * bs, 0, bs);
            auto& f = fill[t.blocks[static_cast<size_t>(i)]];
            f = std::max(f, in_block);
        };
        if (s.lanes) {
            for (int32_t i : s.lanes->held_blocks)
                visit(i);
        } else {
            for (size_t i = 0; i < t.blocks.size(); ++i)
                visit(static_cast<int32_t>(i));
        }
    }
    // Every other block in use (cached, swapped-out sequences' shared ones) holds nothing useful.
    int64_t held = 0;
    for (const auto& [block, f] : fill)
        held += f;
    const int64_t wasted = static_cast<int64_t>(pool.num_used()) * bs - held;
    StepMetrics m;
    m.blocks_used = pool.num_used();
    m.blocks_free = pool.num_free();
    m.blocks_cached = pool.num_cached_free();
    m.internal_fragmentation = static_cast<double>(wasted) / slots;
    if (options_.allocator == Allocator::kContiguous)
        m.external_fragmentation =
            static_cast<double>(pool.num_free() - bm.largest_free_run()) * bs / slots;
    m.fragmentation = m.internal_fragmentation + m.external_fragmentation;
    m.utilization = static_cast<double>(held) / slots;
    m.prefix_hit_rate =
        prefix_total_ > 0 ? static_cast<double>(prefix_reused_) / static_cast<double>(prefix_total_)
                          : 0.0;
    metrics_ = m;
    totals_.peak_blocks_used = std::max(totals_.peak_blocks_used, m.blocks_used);
    totals_.peak_fragmentation = std::max(totals_.peak_fragmentation, m.fragmentation);
    fragmentation_sum_ += m.fragmentation;

    const Reporter& rep = engine_.reporter();
    if (rep.on()) {
        auto metric = [&](const char* name, double v) {
            Event e;
            e.kind = EventKind::kMetric;
            e.value = v;
            e.text = name;
            rep.emit(std::move(e));
        };
        metric("blocks_used", m.blocks_used);
        metric("blocks_free", m.blocks_free);
        metric("blocks_cached", m.blocks_cached);
        metric("internal_fragmentation", m.internal_fragmentation);
        metric("external_fragmentation", m.external_fragmentation);
        metric("fragmentation", m.fragmentation);
        metric("utilization", m.utilization);
        metric("prefix_hit_rate", m.prefix_hit_rate);
    }
}

ServingSummary Scheduler::summary() const {
    ServingSummary s = totals_;
    s.steps = steps_run_;
    for (const Sequence& q : seqs_) {
        s.tokens += q.generated() > 0 ? q.generated() : 0;
        if (q.state == SequenceState::kFinished)
            s.outputs[q.name] =
                std::vector<int32_t>(q.tokens.begin() + q.prompt_len, q.tokens.end());
    }
    s.mean_fragmentation =
        steps_run_ > 0 ? fragmentation_sum_ / static_cast<double>(steps_run_) : 0.0;
    s.prefix_hit_rate = metrics_.prefix_hit_rate;
    s.cow_copies = engine_.blocks().cow_copies();
    s.seconds = s.schedule_seconds + s.forward_seconds;
    s.tokens_per_second = s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0;
    return s;
}

ServingSummary Scheduler::run_to_completion() {
    while (step()) {
    }
    return summary();
}

std::string Scheduler::check_invariants() const {
    std::vector<const BlockTable*> tables;
    for (int32_t i : running_)
        tables.push_back(&seqs_[static_cast<size_t>(i)].table);
    return engine_.blocks().check_invariants(tables);
}

}  // namespace kvscope
