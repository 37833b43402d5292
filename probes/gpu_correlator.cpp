#include "probes/gpu_correlator.h"

#include <algorithm>

namespace kvscope {

void GpuCorrelator::set_activity_clock(const ClockOffset& clock) {
    std::lock_guard lock(mutex_);
    activity_clock_ = clock;
}

void GpuCorrelator::set_sampling_clock(const ClockOffset& clock) {
    std::lock_guard lock(mutex_);
    sampling_clock_ = clock;
}

void GpuCorrelator::set_sample_interval(int64_t interval_ns) {
    std::lock_guard lock(mutex_);
    sample_interval_ns_ = std::max<int64_t>(interval_ns, 0);
}

void GpuCorrelator::add_links(const std::vector<GpuScopeLink>& links) {
    std::lock_guard lock(mutex_);
    for (const GpuScopeLink& l : links)
        links_[l.correlation] = l.external_id;
}

void GpuCorrelator::add_activities(std::vector<GpuActivity>&& activities) {
    std::lock_guard lock(mutex_);
    for (GpuActivity& a : activities) {
        if (a.start_ns == 0 && a.end_ns == 0) {
            ++counts_.untimed;
            continue;
        }
        if (a.kind == GpuActivityKind::kKernel && a.name == kClockProbeKernel) continue;
        held_.push_back({std::move(a), {}, false});
    }
}

void GpuCorrelator::add_samples(const std::vector<PmSample>& samples) {
    std::lock_guard lock(mutex_);
    for (const PmSample& s : samples) {
        if (last_sample_end_ != 0 && sample_interval_ns_ > 0 &&
            s.start_ns > last_sample_end_ + static_cast<uint64_t>(sample_interval_ns_))
            ++counts_.sample_gaps;
        last_sample_end_ = std::max(s.end_ns, s.start_ns);
        samples_.push_back(s);
    }
}

void GpuCorrelator::resolve_locked(Held& h) {
    if (h.resolved) return;
    // A memcpy's runtime call is the one a scope around cudaMemcpyAsync sees first; the driver
    // call under it carries the same external id when its own record was made.
    for (uint32_t id : {h.activity.runtime_correlation, h.activity.correlation}) {
        if (id == 0) continue;
        auto it = links_.find(id);
        if (it == links_.end()) continue;
        h.scope = unpack_gpu_scope(it->second);
        h.resolved = true;
        return;
    }
}

const std::string& GpuCorrelator::display_name_locked(const std::string& mangled) {
    auto it = display_names_.find(mangled);
    if (it == display_names_.end())
        it = display_names_.emplace(mangled, kernel_display_name(mangled)).first;
    return it->second;
}

void GpuCorrelator::release_locked(int64_t step, bool everything, std::vector<Event>& out) {
    const size_t first = out.size();
    std::vector<Held> keep;
    for (Held& h : held_) {
        resolve_locked(h);
        if (!everything && h.resolved && h.scope.step > step) {
            keep.push_back(std::move(h));
            continue;
        }
        if (!h.resolved) {
            // Not claimed by the time its step was taken: launched outside every scope (the
            // caller synchronizes and flushes before taking, so its link would have come).
            ++counts_.unattributed;
            h.scope = {};
        } else if (any_taken_ && h.scope.step >= 0 && h.scope.step <= taken_through_) {
            ++counts_.late;
        }
        GpuActivity& a = h.activity;
        switch (a.kind) {
            case GpuActivityKind::kKernel:
                ++counts_.kernels;
                // Demangled once per kernel, not once per launch.
                a.name = display_name_locked(a.name);
                break;
            case GpuActivityKind::kMemcpy:
                ++counts_.copies;
                break;
            case GpuActivityKind::kMemset:
                ++counts_.sets;
                break;
        }
        const std::string op = ops_ ? ops_->name(h.scope.op) : std::string();
        out.push_back(gpu_activity_event(a, h.scope, op, activity_clock_));
    }
    held_ = std::move(keep);
    for (const PmSample& s : samples_) {
        Event e = hbm_sample_event(s, sampling_clock_);
        e.step = step;
        out.push_back(std::move(e));
        ++counts_.samples;
    }
    samples_.clear();
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                     [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
    // Links of steps before the previous one are no longer needed: their kernels have come.
    if (!everything) {
        for (auto it = links_.begin(); it != links_.end();) {
            const int64_t s = unpack_gpu_scope(it->second).step;
            if (s >= 0 && s < step - 1)
                it = links_.erase(it);
            else
                ++it;
        }
        if (!any_taken_ || step > taken_through_) taken_through_ = step;
        any_taken_ = true;
    } else {
        links_.clear();
    }
}

void GpuCorrelator::take(int64_t step, std::vector<Event>& out) {
    std::lock_guard lock(mutex_);
    release_locked(step, false, out);
}

void GpuCorrelator::take_all(std::vector<Event>& out) {
    std::lock_guard lock(mutex_);
    release_locked(any_taken_ ? taken_through_ : -1, true, out);
}

GpuEventCounts GpuCorrelator::counts() const {
    std::lock_guard lock(mutex_);
    return counts_;
}

}  // namespace kvscope
