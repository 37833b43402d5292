#pragma once
// Opens a `.kvs` session read-only and answers "what was the state at step N" quickly however
// long the run: it loads the per-step scalars and the keyframe index once, then each seek
// decodes the nearest keyframe at or before N and replays the steps after it (or continues
// from the previous seek when scrubbing forward).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/shared_text.h"
#include "sessions/step_summary.h"
#include "sessions/timeline_state.h"

namespace kvscope {

struct AttentionRow {
    int64_t step = 0;
    int32_t request = 0, layer = 0, head = 0, query_pos = 0;
    std::vector<uint8_t> probs;  // u8, 255 = 1.0, one per key position
};

class SessionReader {
  public:
    // Refuses files that are not sessions, newer schema versions, and missing tables, with a
    // message saying which.
    // `step_summaries` false skips loading every step's scalars (steps() stays empty), which is
    // what a one-off seek wants: opening then costs the same for 100 steps or 100 000.
    static Result<std::unique_ptr<SessionReader>> open(const std::string& path,
                                                       bool step_summaries = true);
    ~SessionReader();

    const std::string& path() const { return path_; }
    const RunInfo& info() const { return info_; }
    int32_t schema_version() const { return schema_version_; }
    // Steps that have events, in order (empty when opened without step summaries).
    const std::vector<StepSummary>& steps() const { return steps_; }
    int64_t first_step() const { return first_step_; }
    int64_t last_step() const { return last_step_; }

    // Picks up steps, keyframes and strings written since (a live run being recorded).
    Status refresh();

    // State at the end of `step` (clamped into the run). Errors for corrupt data.
    Result<const TimelineState*> state_at(int64_t step);
    // Events of the steps in [first, last], of the given kinds (all kinds when empty), each
    // with its own copy of its text. Refused, saying so, past kMaxEventBytes: a long text named
    // many times would otherwise be copied as often. Whole runs are read with for_each_event.
    Result<std::vector<Event>> events(int64_t first, int64_t last,
                                      const std::vector<EventKind>& kinds = {});
    static constexpr size_t kMaxEventBytes = size_t{256} << 20;
    // The same one event at a time, its text the session's shared copy (e.text empty): memory
    // stays at one event however many the steps hold. An error from `visit` stops the walk and
    // is returned.
    using EventVisit = std::function<Status(const Event& e, const SharedText& text)>;
    Status for_each_event(int64_t first, int64_t last, const std::vector<EventKind>& kinds,
                          const EventVisit& visit);
    // Every step in order, its summary and its events of `kinds` (as events() gives them; none
    // when `kinds` is empty), one step at a time: what an export of any length holds at once is
    // one step.
    using StepVisit = std::function<Status(const StepSummary& step, std::vector<Event>& events)>;
    Status for_each_step(const std::vector<EventKind>& kinds, const StepVisit& visit);
    // Captured attention rows of one request / layer / head recorded in steps
    // (after_step, up_to_step], in step order (a recomputed row comes after the first).
    Result<std::vector<AttentionRow>> attention(int32_t request, int32_t layer, int32_t head,
                                                int64_t up_to_step, int64_t after_step = -1);
    // The first step with captured attention rows; nullopt when nothing was captured.
    Result<std::optional<int64_t>> first_attention_step();
    // (layer, head) pairs that have captured rows, in order.
    Result<std::vector<std::pair<int32_t, int32_t>>> captured_heads();
    // Requests with captured rows for (layer, head), in order (empty on a read error).
    std::vector<int32_t> captured_requests(int32_t layer, int32_t head);
    // Keyframes as (step, seq) pairs.
    const std::vector<std::pair<int64_t, uint64_t>>& keyframes() const { return keyframes_; }
    Result<std::vector<uint8_t>> keyframe_blob(int64_t step);
    const std::vector<SharedText>& strings() const { return strings_; }

  private:
    struct Impl;
    SessionReader();
    Status apply_steps(TimelineState& state, int64_t after, int64_t up_to);
    Status load_tail();
    Status load_keyframes();

    std::unique_ptr<Impl> impl_;
    std::string path_;
    RunInfo info_;
    int32_t schema_version_ = 0;
    bool load_step_summaries_ = true;
    int64_t first_step_ = 0, last_step_ = -1;
    std::vector<StepSummary> steps_;
    std::vector<std::pair<int64_t, uint64_t>> keyframes_;
    std::vector<SharedText> strings_;
    std::optional<TimelineState> cursor_;
};

}  // namespace kvscope
