#include "sessions/timeline_state.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvscope {

const char* request_phase_name(RequestPhase p) {
    switch (p) {
        case RequestPhase::kWaiting:
            return "waiting";
        case RequestPhase::kRunning:
            return "running";
        case RequestPhase::kSwapped:
            return "swapped";
        case RequestPhase::kFinished:
            return "finished";
        case RequestPhase::kRejected:
            return "rejected";
    }
    return "unknown";
}

TimelineState::TimelineState(const RunInfo& run_info)
    : info(run_info), blocks(static_cast<size_t>(std::max(run_info.num_blocks, 0))) {}

namespace {
bool valid_block(const TimelineState& s, int32_t b) {
    return b >= 0 && static_cast<size_t>(b) < s.blocks.size();
}
void set_entry(RequestState& r, int32_t logical, int32_t block) {
    if (logical < 0) return;
    if (static_cast<size_t>(logical) >= r.block_table.size())
        r.block_table.resize(static_cast<size_t>(logical) + 1, -1);
    r.block_table[static_cast<size_t>(logical)] = block;
}
}  // namespace

void TimelineState::apply(const Event& e) {
    step = std::max(step, e.step);
    last_seq_no = std::max(last_seq_no, e.seq_no);
    auto req = [&]() -> RequestState& {
        RequestState& r = requests[e.request];
        r.index = e.request;
        return r;
    };
    switch (e.kind) {
        case EventKind::kRequestArrive: {
            RequestState& r = req();
            r.name = e.text;
            r.prompt_len = e.a;
            r.max_tokens = e.b;
            r.phase = RequestPhase::kWaiting;
            r.arrival_step = e.step;
            break;
        }
        case EventKind::kRequestReject:
            req().phase = RequestPhase::kRejected;
            break;
        case EventKind::kRequestFinish: {
            RequestState& r = req();
            r.phase = RequestPhase::kFinished;
            r.finish_step = e.step;
            break;
        }
        case EventKind::kToken: {
            RequestState& r = req();
            if (e.a < 0) break;
            auto pos = static_cast<size_t>(e.a);
            if (pos >= r.token_ids.size()) {
                r.token_ids.resize(pos + 1, -1);
                r.token_text.resize(pos + 1);
            }
            r.token_ids[pos] = e.b;
            r.token_text[pos] = e.text;
            break;
        }
        case EventKind::kBlockAlloc:
        case EventKind::kBlockShare: {
            if (!valid_block(*this, e.block)) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            if (e.kind == EventKind::kBlockAlloc) {
                b = BlockState{};
                b.refcount = 1;
                b.alloc_step = e.step;
                b.alloc_owner = e.request;
            } else {
                ++b.refcount;
            }
            b.owners.push_back(e.request);
            if (e.request >= 0) {
                RequestState& r = req();
                set_entry(r, e.a, e.block);
            }
            break;
        }
        case EventKind::kBlockFree: {
            if (!valid_block(*this, e.block)) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            b.refcount = std::max(0, b.refcount - 1);
            auto it = std::find(b.owners.begin(), b.owners.end(), e.request);
            if (it != b.owners.end()) b.owners.erase(it);
            if (e.request >= 0) {
                RequestState& r = req();
                if (e.a >= 0 && static_cast<size_t>(e.a) < r.block_table.size() &&
                    r.block_table[static_cast<size_t>(e.a)] == e.block)
                    r.block_table[static_cast<size_t>(e.a)] = -1;
                while (!r.block_table.empty() && r.block_table.back() == -1)
                    r.block_table.pop_back();
            }
            break;
        }
        case EventKind::kBlockHashed:
            if (valid_block(*this, e.block))
                blocks[static_cast<size_t>(e.block)].hash = static_cast<uint64_t>(e.wide);
            break;
        case EventKind::kBlockEvict:
            if (valid_block(*this, e.block)) blocks[static_cast<size_t>(e.block)].hash.reset();
            break;
        case EventKind::kPreempt: {
            RequestState& r = req();
            ++r.preemptions;
            r.phase = e.a == static_cast<int32_t>(PreemptMode::kSwap) ? RequestPhase::kSwapped
                                                                      : RequestPhase::kWaiting;
            break;
        }
        case EventKind::kSwapIn:
        case EventKind::kRequestAdmit:
            req().phase = RequestPhase::kRunning;
            break;
        case EventKind::kMetric:
            metrics[e.text] = e.value;
            break;
        default:
            break;
    }
}

int32_t TimelineState::blocks_used() const {
    return static_cast<int32_t>(
        std::count_if(blocks.begin(), blocks.end(), [](const BlockState& b) { return !b.free(); }));
}

int32_t TimelineState::blocks_cached() const {
    return static_cast<int32_t>(std::count_if(blocks.begin(), blocks.end(),
                                              [](const BlockState& b) { return b.cached(); }));
}

namespace {
using json = nlohmann::json;
}

std::vector<uint8_t> TimelineState::serialize() const {
    json j;
    j["v"] = 1;
    j["step"] = step;
    j["seq"] = last_seq_no;
    j["nb"] = info.num_blocks;
    json bl = json::array();
    for (const BlockState& b : blocks) {
        if (b.refcount == 0 && !b.hash && b.alloc_step < 0) {
            bl.push_back(nullptr);
            continue;
        }
        bl.push_back(json::array({b.refcount, b.owners, b.hash ? json(*b.hash) : json(nullptr),
                                  b.alloc_step, b.alloc_owner}));
    }
    j["blocks"] = std::move(bl);
    json rq = json::array();
    for (const auto& [i, r] : requests)
        rq.push_back(json::array({r.index, r.name, static_cast<int>(r.phase), r.prompt_len,
                                  r.max_tokens, r.block_table, r.token_ids, r.token_text,
                                  r.preemptions, r.arrival_step, r.finish_step}));
    j["requests"] = std::move(rq);
    j["metrics"] = metrics;
    return json::to_cbor(j);
}

std::optional<TimelineState> TimelineState::deserialize(const std::vector<uint8_t>& bytes,
                                                        std::string& error) {
    json j = json::from_cbor(bytes, true, false);
    if (j.is_discarded() || !j.is_object()) {
        error = "keyframe is not valid CBOR";
        return std::nullopt;
    }
    try {
        if (j.at("v").get<int>() != 1) {
            error = "keyframe has an unknown version";
            return std::nullopt;
        }
        RunInfo info;
        info.num_blocks = j.at("nb").get<int32_t>();
        if (info.num_blocks < 0 || info.num_blocks > (1 << 26)) {
            error = "keyframe has an absurd block count";
            return std::nullopt;
        }
        TimelineState s(info);
        s.step = j.at("step").get<int64_t>();
        s.last_seq_no = j.at("seq").get<uint64_t>();
        const json& bl = j.at("blocks");
        if (!bl.is_array() || bl.size() != s.blocks.size()) {
            error = "keyframe block list does not match the pool size";
            return std::nullopt;
        }
        for (size_t i = 0; i < bl.size(); ++i) {
            if (bl[i].is_null()) continue;
            BlockState& b = s.blocks[i];
            b.refcount = bl[i].at(0).get<int32_t>();
            b.owners = bl[i].at(1).get<std::vector<int32_t>>();
            if (!bl[i].at(2).is_null()) b.hash = bl[i].at(2).get<uint64_t>();
            b.alloc_step = bl[i].at(3).get<int64_t>();
            b.alloc_owner = bl[i].at(4).get<int32_t>();
        }
        for (const json& r : j.at("requests")) {
            RequestState q;
            q.index = r.at(0).get<int32_t>();
            q.name = r.at(1).get<std::string>();
            int phase = r.at(2).get<int>();
            if (phase < 0 || phase > static_cast<int>(RequestPhase::kRejected)) {
                error = "keyframe has an unknown request state";
                return std::nullopt;
            }
            q.phase = static_cast<RequestPhase>(phase);
            q.prompt_len = r.at(3).get<int32_t>();
            q.max_tokens = r.at(4).get<int32_t>();
            q.block_table = r.at(5).get<std::vector<int32_t>>();
            q.token_ids = r.at(6).get<std::vector<int32_t>>();
            q.token_text = r.at(7).get<std::vector<std::string>>();
            q.preemptions = r.at(8).get<int32_t>();
            q.arrival_step = r.at(9).get<int64_t>();
            q.finish_step = r.at(10).get<int64_t>();
            s.requests[q.index] = std::move(q);
        }
        s.metrics = j.at("metrics").get<std::map<std::string, double>>();
        return s;
    } catch (const std::exception& ex) {
        error = std::string("keyframe is malformed: ") + ex.what();
        return std::nullopt;
    }
}

bool TimelineState::operator==(const TimelineState& o) const {
    auto same_blocks = [&] {
        if (blocks.size() != o.blocks.size()) return false;
        for (size_t i = 0; i < blocks.size(); ++i) {
            const BlockState &a = blocks[i], &b = o.blocks[i];
            auto oa = a.owners, ob = b.owners;
            std::sort(oa.begin(), oa.end());
            std::sort(ob.begin(), ob.end());
            if (a.refcount != b.refcount || oa != ob || a.hash != b.hash ||
                a.alloc_step != b.alloc_step)
                return false;
        }
        return true;
    };
    auto same_requests = [&] {
        if (requests.size() != o.requests.size()) return false;
        for (const auto& [i, a] : requests) {
            auto it = o.requests.find(i);
            if (it == o.requests.end()) return false;
            const RequestState& b = it->second;
            if (a.name != b.name || a.phase != b.phase || a.block_table != b.block_table ||
                a.token_ids != b.token_ids || a.token_text != b.token_text ||
                a.preemptions != b.preemptions || a.prompt_len != b.prompt_len ||
                a.max_tokens != b.max_tokens)
                return false;
        }
        return true;
    };
    return step == o.step && same_blocks() && same_requests() && metrics == o.metrics;
}

}  // namespace kvscope
