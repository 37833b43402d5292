#pragma once
// The GUI's live run: the engine and scheduler behind the ui::Controller interface, recording
// every step to a session file that the UI reads back, so live and replay show the same thing
// through the same code.

#include <memory>
#include <string>
#include <vector>

#include "app/eviction_flags.h"
#include "app/live_recording.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "ui/controller.h"

namespace kvscope::app {

// The live settings' storing-less part, as the command-line flags hold it.
EvictionFlags eviction_flags(const LiveSettings& settings);

class LiveController : public Controller {
  public:
    static Result<std::unique_ptr<LiveController>> create(std::shared_ptr<const LoadedModel> model,
                                                          std::vector<Request> workload,
                                                          std::string workload_name,
                                                          const LiveSettings& settings,
                                                          const EngineOptions& base);
    ~LiveController() override;

    int step(int n) override;
    bool finished() const override;
    Status restart(const LiveSettings& settings) override;
    Status add_prompt(const std::string& text, int max_tokens) override;
    const LiveSettings& settings() const override { return settings_; }
    SessionReader& session() override { return recording_->reader(); }
    std::string describe() const override;
    std::string recording_path() const override {
        return recording_ ? recording_->kept_path() : "";
    }
    std::string problem() const override { return problem_; }
    std::vector<PendingRequest> pending() const override;

  private:
    LiveController() = default;
    Status start();
    // Ends the run's recording: the scheduler first, which may still report to it.
    void stop_recording();

    std::shared_ptr<const LoadedModel> model_;
    std::vector<Request> workload_;
    std::string workload_name_;
    LiveSettings settings_;
    EngineOptions base_;  // threads and matmul from the command line
    std::unique_ptr<Engine> engine_;
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<LiveRecording> recording_;
    int added_ = 0;
    int starts_ = 0;
    std::string problem_;
};

}  // namespace kvscope::app
