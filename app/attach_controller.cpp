#include "app/attach_controller.h"

#include <algorithm>

#include "app/attach_session.h"

namespace kvscope::app {

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Long enough to take in a busy deployment's batches between two frames, short enough that a
// frame is not held up waiting for traffic that is not there.
constexpr milliseconds kFrameBudget{5};
}  // namespace

std::unique_ptr<AttachController> AttachController::start(
    std::unique_ptr<attach::Attacher> attacher, std::unique_ptr<LiveRecording> recording,
    const std::atomic<bool>& stop, double duration_s) {
    std::unique_ptr<AttachController> c(new AttachController());
    c->attacher_ = std::move(attacher);
    c->recording_ = std::move(recording);
    c->settings_.record = !c->recording_->kept_path().empty();
    c->settings_.record_path = c->recording_->kept_path();
    c->started_ = Clock::now();
    c->attacher_->start(&c->recording_->recorder(), &stop, duration_s);
    return c;
}

int AttachController::pump(milliseconds budget) {
    const auto until = Clock::now() + budget;
    int ended = 0;
    while (!attacher_->ended()) {
        const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
        auto steps = attacher_->pump(std::max(left, milliseconds(0)));
        if (!steps) {
            followed_ = steps.error();
            if (problem_.empty()) problem_ = steps.error().message;
            break;
        }
        ended += *steps;
        if (*steps > 0 || Clock::now() >= until) break;
    }
    if (attacher_->ended() && ended_ == Clock::time_point{}) ended_ = Clock::now();
    if (ended > 0) {
        if (Status s = recording_->sync(); !s && problem_.empty()) problem_ = s.error().message;
        if (recording_->recorder().failed() && problem_.empty())
            problem_ = "the recording stopped: " + recording_->recorder().flush().error().message;
    }
    return ended;
}

int AttachController::step(int) {
    return pump(kFrameBudget);
}

Status AttachController::restart(const LiveSettings&) {
    return Error{
        "an attached deployment cannot be restarted from kvscope: its settings are its own"};
}

Status AttachController::add_prompt(const std::string&, int) {
    return Error{
        "an attached deployment takes requests from its own clients: send the prompt to it"};
}

std::string AttachController::describe() const {
    const auto publishers = attacher_->run_info().publishers;
    std::string out = "attached: ";
    for (size_t i = 0; i < publishers.size(); ++i)
        out += (i ? ", " : "") + publishers[i];
    return out;
}

std::string AttachController::progress() const {
    return attach_progress(attacher_->stats(), seconds());
}

std::vector<std::string> AttachController::notes() const {
    std::vector<std::string> lines;
    for (const attach::PublisherStats& s : attacher_->stats())
        for (const attach::PublisherNote& n : s.notes)
            lines.push_back(s.endpoint + ": " + n.text + " (" + std::to_string(n.count) + ")");
    return lines;
}

Status AttachController::finish() {
    attacher_->end();
    // Bounded: counting what is queued stops after half a second, asking for the tail after
    // the replay timeout; an error ends the attacher too.
    while (!attacher_->ended())
        pump(milliseconds(50));
    return recording_->close();
}

double AttachController::seconds() const {
    const auto end = ended_ == Clock::time_point{} ? Clock::now() : ended_;
    return std::chrono::duration<double>(end - started_).count();
}

}  // namespace kvscope::app
