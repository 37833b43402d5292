#pragma once
// The Probe: where the engine reports what it does. The engine holds a Probe* that is null when
// nobody listens, so a disabled probe costs one branch at each report site.

#include "probes/event.h"

namespace kvscope {

class Probe {
  public:
    virtual ~Probe() = default;
    // Called on the engine thread; must not block on I/O (the recorder queues and returns).
    // The probe assigns seq_no and fills t_ns when it is 0.
    virtual void emit(Event&& event) = 0;
    // Many events at once, in order (a step's op spans): one hand-over instead of one each.
    virtual void emit_all(std::vector<Event>& events) {
        for (Event& e : events)
            emit(std::move(e));
    }
    // True once the probe can no longer take events (a recorder whose disk filled up): the
    // scheduler then stops the run at the next step rather than go on unrecorded.
    virtual bool failed() const { return false; }
};

// Fans one stream out to several probes (recorder + live Timeline, say).
class ProbeFanout : public Probe {
  public:
    void add(Probe* p) { probes_[count_++] = p; }
    void emit(Event&& event) override;
    void emit_all(std::vector<Event>& events) override;
    bool failed() const override;

  private:
    Probe* probes_[4] = {};
    int count_ = 0;
};

}  // namespace kvscope
