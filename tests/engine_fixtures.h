#pragma once
// What engine tests share: the bundled model loaded once per test binary, and a probe that keeps
// every event the engine reports (a sink for a test, as the recorder is for a run).

#include <memory>
#include <vector>

#include "engine/model_loader.h"
#include "probes/probe.h"

namespace kvscope::test {

struct EventCollector : Probe {
    std::vector<Event> events;
    void emit(Event&& e) override { events.push_back(std::move(e)); }
};

// assets/models/kvscope-demo.gguf, loaded on first use (a failure is a test failure).
std::shared_ptr<const LoadedModel> bundled_loaded_model();

}  // namespace kvscope::test
