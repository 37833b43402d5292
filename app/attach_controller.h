#pragma once
// The window's view of an attached deployment (`kvscope attach --gui`): the Attacher behind the
// ui::Controller interface, recording every tick to a session file that the window reads back
// as it grows, the way it shows the engine's live run. A deployment moves on wall time, not
// on request: the window calls step() every frame, and each call takes in what the publishers
// sent without waiting more than a few milliseconds. It cannot be restarted or given prompts.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "app/live_recording.h"
#include "attach/attacher.h"
#include "ui/controller.h"

namespace kvscope::app {

class AttachController : public Controller {
  public:
    // Starts following with `attacher` into `recording`, until `stop` is set (Ctrl-C) or
    // `duration_s` (> 0) has passed.
    static std::unique_ptr<AttachController> start(std::unique_ptr<attach::Attacher> attacher,
                                                   std::unique_ptr<LiveRecording> recording,
                                                   const std::atomic<bool>& stop,
                                                   double duration_s);

    // Takes in what has arrived, ends the tick when its time is up, and shows the steps that
    // ended; waits at most a few milliseconds. Returns the steps that ended (`n` is no count of
    // steps to run: the deployment sets the pace).
    int step(int n) override;
    bool finished() const override { return attacher_->ended(); }
    Status restart(const LiveSettings& settings) override;
    Status add_prompt(const std::string& text, int max_tokens) override;
    const LiveSettings& settings() const override { return settings_; }
    SessionReader& session() override { return recording_->reader(); }
    std::string describe() const override;
    std::string recording_path() const override { return recording_->kept_path(); }
    std::string problem() const override { return problem_; }
    std::vector<PendingRequest> pending() const override { return {}; }
    std::string progress() const override;
    std::vector<std::string> notes() const override;

    // Ends following (as Ctrl-C does; what is still to come is asked of the replay sockets, a
    // few seconds at most) and closes the recording: once the window has closed. Returns the
    // recording's close status.
    Status finish();
    // Why following stopped early (ok when it did not).
    const Status& followed() const { return followed_; }
    const attach::Attacher& attacher() const { return *attacher_; }
    // From start to the end of following (or now, while it goes on).
    double seconds() const;

  private:
    AttachController() = default;
    // Pumps the attacher for at most `budget`; returns the steps that ended.
    int pump(std::chrono::milliseconds budget);

    std::unique_ptr<attach::Attacher> attacher_;
    std::unique_ptr<LiveRecording> recording_;
    LiveSettings settings_;  // nothing in it applies to a deployment; the interface asks for it
    std::chrono::steady_clock::time_point started_, ended_;
    Status followed_;
    std::string problem_;
};

}  // namespace kvscope::app
