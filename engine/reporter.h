#pragma once
// Stamps engine events with the run and current step and hands them to the Probe, if any.
// Report sites test `on()` first so that building an event costs nothing when nobody listens.

#include <cstdint>
#include <utility>

#include "probes/probe.h"

namespace kvscope {

struct Reporter {
    Probe* probe = nullptr;
    int32_t run = 0;
    int64_t step = 0;
    mutable uint64_t last_seq_no = 0;  // seq_no is assigned here, once, for every listener

    bool on() const { return probe != nullptr; }
    void emit(Event e) const {
        stamp(e, host_now_ns());
        probe->emit(std::move(e));
    }
    // Stamps each event as emit() does and hands them over together; `events` is left moved
    // from.
    void emit_all(std::vector<Event>& events) const {
        const int64_t now = host_now_ns();
        for (Event& e : events)
            stamp(e, now);
        probe->emit_all(events);
    }

  private:
    void stamp(Event& e, int64_t now) const {
        e.run = run;
        e.step = step;
        e.seq_no = ++last_seq_no;
        if (e.t_ns == 0) e.t_ns = now;  // kernel events carry their start
    }
};

}  // namespace kvscope
