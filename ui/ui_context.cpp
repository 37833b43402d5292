#include "ui/ui_context.h"

#include <algorithm>

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
    view.cursor = session->last_step();
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
    if (!session || session->last_step() < 0) return;
    view.cursor = std::clamp<int64_t>(view.cursor, 0, session->last_step());
    auto s = session->state_at(view.cursor);
    if (!s) {
        view.message = s.error().message;
        return;
    }
    state = s.value();
}

const std::vector<Event>& UiContext::eviction_log() {
    if (evictions_of_ != session) {
        evictions_.clear();
        evictions_upto_ = -1;
        evictions_of_ = session;
    }
    if (session && session->last_step() > evictions_upto_) {
        auto more =
            session->events(evictions_upto_ + 1, session->last_step(),
                            {EventKind::kPreempt, EventKind::kBlockEvict, EventKind::kTokenEvict,
                             EventKind::kSwapOut, EventKind::kSwapIn, EventKind::kRequestReject});
        if (more) {
            evictions_.insert(evictions_.end(), more->begin(), more->end());
            evictions_upto_ = session->last_step();
        } else {
            view.message = more.error().message;
        }
    }
    return evictions_;
}

const std::vector<std::pair<int32_t, int32_t>>& UiContext::captured_heads() {
    if (captured_of_ != session) {
        captured_of_ = session;
        captured_.clear();
        captured_upto_ = -2;
    }
    // Asked once per new step at most: a replay without capture does not query every frame.
    if (captured_.empty() && session && session->last_step() > captured_upto_) {
        captured_upto_ = session->last_step();
        auto heads = session->captured_heads();
        if (heads) captured_ = std::move(heads).value();
    }
    return captured_;
}

const std::vector<AttentionRow>& UiContext::attention_rows(int32_t request, int layer, int head) {
    auto key = std::make_tuple(session, request, layer, head);
    if (key != attention_key_) {
        attention_key_ = key;
        attention_.clear();
        attention_upto_ = -1;
    }
    // Rows only ever arrive: moving the cursor forward reads the new steps' rows, moving it back
    // reads nothing (callers skip rows past the cursor).
    if (session && request >= 0 && view.cursor > attention_upto_) {
        auto rows = session->attention(request, layer, head, view.cursor, attention_upto_);
        if (rows) {
            attention_.insert(attention_.end(), std::make_move_iterator(rows->begin()),
                              std::make_move_iterator(rows->end()));
            attention_upto_ = view.cursor;
        } else {
            view.message = rows.error().message;
        }
    }
    return attention_;
}

}  // namespace kvscope::ui
