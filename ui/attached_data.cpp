// What the Deployment and Prefix trees panels read of an attached session, kept between frames:
// the prefix trees of the state shown (built when the state changes), the search over them
// (run when the text or the trees change), and the blocks held per publisher and medium at
// every step (read once, extended as a live recording grows).
#include <algorithm>
#include <charconv>
#include <string>

#include "ui/ui_context.h"

namespace kvscope::ui {

const AttachedIndex& UiContext::attached_index() {
    AttachedCache& c = attached_;
    const TimelineState* s = attached() ? state : nullptr;
    std::tuple<SessionReader*, int64_t, uint64_t, size_t> key{
        s ? session : nullptr, s ? s->step : -2, s ? s->last_seq_no : 0, s ? s->blocks.size() : 0};
    if (key != c.key) {
        c.key = key;
        c.index = s ? AttachedIndex::build(*s) : AttachedIndex{};
        ++c.build;
    }
    return c.index;
}

const AttachedQuery& UiContext::attached_query() {
    attached_match();
    return attached_.query;
}

const AttachedMatch& UiContext::attached_match() {
    const AttachedIndex& index = attached_index();
    AttachedCache& c = attached_;
    if (c.searched != view.deploy_search || c.searched_build != c.build) {
        c.searched = view.deploy_search;
        c.searched_build = c.build;
        c.query = parse_attached_query(view.deploy_search);
        c.match = state && attached() ? search_attached(index, *state, c.query) : AttachedMatch{};
    }
    return c.match;
}

namespace {
// "attach/<publisher>/<MEDIUM>" -> (publisher, medium); false for any other metric.
bool attached_metric(const std::string& name, int32_t& publisher, KvMedium& medium) {
    constexpr std::string_view kPrefix = "attach/";
    if (!name.starts_with(kPrefix)) return false;
    const size_t slash = name.find('/', kPrefix.size());
    if (slash == std::string::npos) return false;
    const char* first = name.data() + kPrefix.size();
    const char* last = name.data() + slash;
    auto [end, ec] = std::from_chars(first, last, publisher);
    if (ec != std::errc{} || end != last || publisher < 0) return false;
    medium = kv_medium_from_name(std::string_view(name).substr(slash + 1));
    return true;
}
}  // namespace

const std::vector<int64_t>& UiContext::attached_steps() {
    attached_series();
    return attached_.steps;
}

const std::vector<UiContext::AttachedSeries>& UiContext::attached_series() {
    AttachedCache& c = attached_;
    SessionReader* run = attached() ? session : nullptr;
    if (c.series_of != run) {
        c.series_of = run;
        c.series_upto = -1;
        c.steps.clear();
        c.series.clear();
    }
    if (!run || run->last_step() <= c.series_upto) return c.series;
    const size_t publishers = run->info().publishers.size();
    auto more = run->events(c.series_upto + 1, run->last_step(), {EventKind::kMetric});
    if (!more) {
        view.message = more.error().message;
        view.message_is_error = true;
        c.series_upto = run->last_step();  // asked again only when the run grows
        return c.series;
    }
    for (const Event& e : *more) {
        int32_t p = 0;
        KvMedium m = KvMedium::kGpu;
        if (!attached_metric(e.text, p, m) || static_cast<size_t>(p) >= publishers) continue;
        if (c.steps.empty() || c.steps.back() != e.step) {
            c.steps.push_back(e.step);
            for (AttachedSeries& s : c.series)
                s.values.push_back(0.0f);
        }
        auto it = std::find_if(c.series.begin(), c.series.end(), [&](const AttachedSeries& s) {
            return s.publisher == p && s.medium == m;
        });
        if (it == c.series.end()) {
            AttachedSeries s;
            s.publisher = p;
            s.medium = m;
            s.label = "rank " + std::to_string(p) + " " + std::string(kv_medium_name(m));
            s.values.assign(c.steps.size(), 0.0f);
            // Kept in (publisher, medium) order.
            it = c.series.insert(
                std::upper_bound(c.series.begin(), c.series.end(), s,
                                 [](const AttachedSeries& a, const AttachedSeries& b) {
                                     return std::pair(a.publisher, a.medium) <
                                            std::pair(b.publisher, b.medium);
                                 }),
                std::move(s));
        }
        it->values.back() = static_cast<float>(e.value);
    }
    c.series_upto = run->last_step();
    return c.series;
}

const std::vector<UiContext::AttachedSeries>& UiContext::attached_totals() {
    const auto& series = attached_series();
    AttachedCache& c = attached_;
    if (c.totals_of == c.series_of && c.totals_upto == c.series_upto) return c.totals;
    c.totals_of = c.series_of;
    c.totals_upto = c.series_upto;
    c.totals.clear();
    const size_t n = c.steps.size();
    auto total = [&](const std::string& label, int32_t publisher, KvMedium medium, auto&& takes) {
        AttachedSeries t;
        t.label = label;
        t.publisher = publisher;
        t.medium = medium;
        t.values.assign(n, 0.0f);
        bool any = false;
        for (const AttachedSeries& s : series)
            if (takes(s)) {
                any = true;
                for (size_t i = 0; i < n && i < s.values.size(); ++i)
                    t.values[i] += s.values[i];
            }
        if (any) c.totals.push_back(std::move(t));
    };
    for (int m = 0; m < kNumKvMedia; ++m) {
        const auto medium = static_cast<KvMedium>(m);
        total("all ranks " + std::string(kv_medium_name(medium)), -1, medium,
              [&](const AttachedSeries& s) { return s.medium == medium; });
    }
    const auto publishers =
        c.series_of ? static_cast<int32_t>(c.series_of->info().publishers.size()) : 0;
    for (int32_t p = 0; p < publishers; ++p)
        total("rank " + std::to_string(p), p, KvMedium::kOther,
              [&](const AttachedSeries& s) { return s.publisher == p; });
    return c.totals;
}

const AttachedHistory& UiContext::attached_history() {
    AttachedCache& c = attached_;
    SessionReader* run = attached() ? session : nullptr;
    if (c.history_of != run || !c.history) {
        c.history.emplace(run ? run->info() : RunInfo{});
        c.history_of = run;
        c.history_upto = -1;
    }
    if (!run || run->last_step() <= c.history_upto) return *c.history;
    // Steps are written whole, so what is read up to the last step is never read again.
    auto more = run->events(c.history_upto + 1, run->last_step(),
                            {EventKind::kKvStored, EventKind::kKvRemoved, EventKind::kKvCleared});
    c.history_upto = run->last_step();  // on an error too: asked again only when the run grows
    if (!more) {
        view.message = more.error().message;
        view.message_is_error = true;
        return *c.history;
    }
    c.history->add(*more);
    return *c.history;
}

}  // namespace kvscope::ui
