#include "ui/ui_context.h"

#include <imgui.h>

#include <algorithm>

#include "sessions/request_progress.h"

namespace kvscope::ui {

bool UiContext::open_session(const std::string& path) {
    auto r = SessionReader::open(path);
    if (!r) {
        view.message = "Could not open " + path + ": " + r.error().message;
        view.message_is_error = true;
        return false;
    }
    view.message_is_error = false;
    owned_session = std::move(r).value();
    session = owned_session.get();
    controller = nullptr;
    view.cursor = opening_step(*session);
    view.selected_request = view.selected_block = -1;
    view.view_lo = 0;
    view.view_hi = -1;
    title = path;
    view.message =
        "Replaying " + path + ": drag the timeline or use Left/Right to move through steps.";
    update_state();
    return true;
}

bool UiContext::open_compare(const std::string& path) {
    auto r = SessionReader::open(path);
    if (!r) {
        view.message = "Could not open " + path + ": " + r.error().message;
        view.message_is_error = true;
        return false;
    }
    compare = std::move(r).value();
    return true;
}

void UiContext::set_cursor(int64_t step) {
    view.cursor = std::clamp<int64_t>(step, 0, std::max<int64_t>(last_step(), 0));
    view.follow_live = controller && view.cursor >= last_step();
}

void UiContext::update_state() {
    state = nullptr;
    if (!session) return;
    if (session->last_step() < 0) {
        // Before a live run's first step: the pool exists, all free, and no request holds any.
        if (empty_of_ != session) {
            empty_state_.emplace(session->info());
            empty_of_ = session;
        }
        state = &*empty_state_;
        return;
    }
    view.cursor = std::clamp<int64_t>(view.cursor, 0, session->last_step());
    auto s = session->state_at(view.cursor);
    if (!s) {
        view.message = s.error().message;
        return;
    }
    state = s.value();
    update_compare_state();
}

void UiContext::update_compare_state() {
    compare_state = nullptr;
    compare_step = -1;
    compare_note.clear();
    if (!compare || compare->last_step() < 0) return;
    int64_t right = std::min(view.cursor, compare->last_step());
    if (view.compare_align == 1) {
        // The step at which the selected request holds as many tokens on the right as it does
        // here: paged and contiguous runs of one workload reach it at different steps.
        const RequestState* sel = nullptr;
        if (state) {
            auto it = state->requests.find(view.selected_request);
            if (it != state->requests.end()) sel = &it->second;
        }
        if (!sel) {
            compare_note = "Select a request to align the right run on its progress.";
        } else {
            std::tuple<SessionReader*, int64_t, int32_t> key{compare.get(), view.cursor,
                                                             view.selected_request};
            if (key != aligned_key_) {
                aligned_key_ = key;
                aligned_step_ = first_step_with_tokens(*compare, sel->name, sel->num_tokens());
            }
            std::string what =
                sel->name.str() + " at " + std::to_string(sel->num_tokens()) + " tokens";
            if (aligned_step_ < 0) {
                compare_note = what + ": not reached on the right.";
                return;
            }
            right = aligned_step_;
            compare_note = what + ": left step " + std::to_string(view.cursor) + ", right step " +
                           std::to_string(right);
        }
    }
    auto other = compare->state_at(right);
    if (!other) {
        compare_note = other.error().message;
        return;
    }
    compare_state = other.value();
    compare_step = right;
}

int32_t UiContext::request_in(Side side, int32_t main_request) const {
    if (side == Side::kMain || !state || !compare_state) return main_request;
    auto it = state->requests.find(main_request);
    if (it == state->requests.end()) return -1;
    for (const auto& [i, r] : compare_state->requests)
        if (r.name == it->second.name) return i;
    return -1;
}

void UiContext::select_request_named(const std::string& name) {
    if (!state) return;
    for (const auto& [i, r] : state->requests)
        if (r.name == name) {
            view.selected_request = view.heat_request = i;
            return;
        }
}

void text_disabled_wrapped(const std::string& text) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyle().Colors[ImGuiCol_TextDisabled]);
    ImGui::TextWrapped("%s", text.c_str());
    ImGui::PopStyleColor();
}

void same_line_if_fits(float width) {
    // Measured before moving beside the last item: SameLine() then NewLine() would count the
    // spacing there as content, a panel one spacing wider than what it shows (a scrollbar).
    const float right = ImGui::GetCursorScreenPos().x + ImGui::GetContentRegionAvail().x;
    if (right - (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x) >= width)
        ImGui::SameLine();
}

int64_t opening_step(SessionReader& session) {
    auto first = session.first_attention_step();
    if (first && first.value().has_value()) return *first.value();
    int64_t best = session.last_step();
    int32_t most = -1;
    for (const StepSummary& s : session.steps())
        if (s.running > most) {
            most = s.running;
            best = s.step;
        }
    return best;
}

const std::vector<PendingRequest>& UiContext::pending_requests() {
    if (!controller) {
        pending_.clear();
        return pending_;
    }
    if (pending_of_ != controller || pending_upto_ != last_step()) {
        pending_ = controller->pending();
        pending_of_ = controller;
        pending_upto_ = last_step();
    }
    return pending_;
}

std::string UiContext::run_status() {
    if (!session) return controller ? "Live run not started" : "No session";
    const int64_t last = last_step();
    std::string out;
    if (controller && attached()) {
        out = controller->finished() ? "Attach ended" : "Attached";
        out += before_first_step()
                   ? ", before step 0"
                   : ": step " + std::to_string(view.cursor) + " of " + std::to_string(last);
    } else if (controller) {
        out = view.playing ? "Playing" : controller->finished() ? "Finished" : "Paused";
        out += before_first_step()
                   ? " before step 0"
                   : " at step " + std::to_string(view.cursor) + " of " + std::to_string(last);
    } else {
        out = std::string(view.playing ? "Replaying" : "Replay") + ": step " +
              std::to_string(view.cursor) + " of " + std::to_string(session->first_step()) + ".." +
              std::to_string(last);
    }
    if (state && !attached()) {  // a deployment's requests are not published
        int counts[5] = {};
        for (const auto& [i, r] : state->requests)
            ++counts[static_cast<int>(r.phase)];
        out += " | " + std::to_string(counts[static_cast<int>(RequestPhase::kRunning)]) +
               " running, " + std::to_string(counts[static_cast<int>(RequestPhase::kWaiting)]) +
               " waiting, " + std::to_string(counts[static_cast<int>(RequestPhase::kFinished)]) +
               " finished";
        if (int swapped = counts[static_cast<int>(RequestPhase::kSwapped)])
            out += ", " + std::to_string(swapped) + " swapped";
    }
    if (controller)
        if (size_t queued = pending_requests().size())
            out += ", " + std::to_string(queued) + " not arrived";
    return out;
}

const std::vector<TokenDivergence>& UiContext::divergences() {
    if (!session || !compare) {
        divergences_.clear();
        return divergences_;
    }
    auto key = std::make_tuple(session, compare.get(), session->last_step(), compare->last_step());
    if (key != divergence_key_) {
        divergence_key_ = key;
        auto d = token_divergence(*session, *compare);
        if (d)
            divergences_ = std::move(d).value();
        else
            view.message = d.error().message;
    }
    return divergences_;
}

const CostComparison& UiContext::costs() {
    if (!session || !compare) {
        costs_ = {};
        return costs_;
    }
    auto key = std::make_tuple(session, compare.get(), session->last_step(), compare->last_step());
    if (key != costs_key_) {
        costs_key_ = key;
        auto c = compare_costs(*session, *compare);
        if (c)
            costs_ = std::move(c).value();
        else
            view.message = c.error().message;
    }
    return costs_;
}

const UiContext::FlopsSeries& UiContext::step_flops() {
    if (flops_of_ != session) {
        flops_ = {};
        flops_of_ = session;
        flops_upto_ = -1;
    }
    if (!session || session->steps().empty() || session->last_step() <= flops_upto_) return flops_;
    const int64_t last = session->last_step();
    auto f = kvscope::step_flops(*session, std::max(flops_upto_ + 1, session->first_step()), last);
    if (!f) {
        view.message = f.error().message;
        return flops_;
    }
    for (const auto& [step, flops] : *f) {
        flops_.steps.push_back(step);
        flops_.mflops.push_back(static_cast<float>(static_cast<double>(flops) * 1e-6));
    }
    flops_upto_ = last;
    return flops_;
}

const StepSummary* UiContext::step_summary(Side side) const {
    SessionReader* run = session_of(side);
    if (!run) return nullptr;
    const auto& steps = run->steps();
    const int64_t at = cursor_of(side);
    auto it = std::lower_bound(steps.begin(), steps.end(), at,
                               [](const StepSummary& s, int64_t v) { return s.step < v; });
    return it != steps.end() && it->step == at ? &*it : nullptr;
}

const UiContext::StepWork& UiContext::step_work(Side side) {
    RunCache& c = runs_[static_cast<int>(side)];
    SessionReader* run = session_of(side);
    const int64_t at = cursor_of(side);
    // A step's row is written whole, so once read its ops do not change; only a step not yet
    // written when asked for is asked for again, when the run has grown.
    const int64_t last = run ? run->last_step() : -1;
    const bool unwritten = at > std::get<2>(c.ops_key);
    if (std::get<0>(c.ops_key) != run || std::get<1>(c.ops_key) != at ||
        (unwritten && last != std::get<2>(c.ops_key))) {
        c.ops_key = {run, at, last};
        c.work = {};
        if (run && at >= 0 && at <= run->last_step()) {
            auto events = run->events(at, at, {EventKind::kKernel, EventKind::kHbmSample});
            if (events) {
                const std::vector<OpRecord> ops = ops_of(*events);
                c.work.host = host_ops(ops);
                c.work.gpu = gpu_ops(ops);
                c.work.hbm = hbm_samples_of(*events);
            } else {
                view.message = events.error().message;
            }
        }
    }
    return c.work;
}

const std::vector<Event>& UiContext::eviction_log(Side side) {
    RunCache& c = runs_[static_cast<int>(side)];
    SessionReader* run = session_of(side);
    if (c.evictions_of != run) {
        c.evictions.clear();
        c.evictions_upto = -1;
        c.evictions_of = run;
    }
    if (run && run->last_step() > c.evictions_upto) {
        auto more = run->events(c.evictions_upto + 1, run->last_step(),
                                {EventKind::kPreempt, EventKind::kBlockEvict,
                                 EventKind::kTokenEvict, EventKind::kTokenMove, EventKind::kSwapOut,
                                 EventKind::kSwapIn, EventKind::kRequestReject});
        if (more) {
            c.evictions.insert(c.evictions.end(), more->begin(), more->end());
            c.evictions_upto = run->last_step();
        } else {
            view.message = more.error().message;
        }
    }
    return c.evictions;
}

const std::vector<std::pair<int32_t, int32_t>>& UiContext::captured_heads(Side side) {
    RunCache& c = runs_[static_cast<int>(side)];
    SessionReader* run = session_of(side);
    if (c.captured_of != run) {
        c.captured_of = run;
        c.captured.clear();
        c.captured_upto = -2;
    }
    // Asked once per new step at most: a replay without capture does not query every frame.
    if (c.captured.empty() && run && run->last_step() > c.captured_upto) {
        c.captured_upto = run->last_step();
        auto heads = run->captured_heads();
        if (heads) c.captured = std::move(heads).value();
    }
    return c.captured;
}

const std::vector<AttentionRow>& UiContext::attention_rows(int32_t request, int layer, int head,
                                                           Side side) {
    RunCache& c = runs_[static_cast<int>(side)];
    SessionReader* run = session_of(side);
    const int64_t cursor = cursor_of(side);
    auto key = std::make_tuple(run, request, layer, head);
    if (key != c.attention_key) {
        c.attention_key = key;
        c.attention.clear();
        c.attention_upto = -1;
    }
    // Rows only ever arrive: moving the cursor forward reads the new steps' rows, moving it back
    // reads nothing (callers skip rows past the cursor).
    if (run && request >= 0 && cursor > c.attention_upto) {
        auto rows = run->attention(request, layer, head, cursor, c.attention_upto);
        if (rows) {
            c.attention.insert(c.attention.end(), std::make_move_iterator(rows->begin()),
                               std::make_move_iterator(rows->end()));
            c.attention_upto = cursor;
        } else {
            view.message = rows.error().message;
        }
    }
    return c.attention;
}

}  // namespace kvscope::ui
