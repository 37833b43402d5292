#pragma once
// A window's live run as a recording that grows: the Recorder writing it, a SessionReader on
// the file being written (refreshed after every step, so the window shows the newest one), and
// the file itself, kept where the user asked or a temporary one removed when the run is over.
// The engine's live run and an attached deployment record through this one piece.

#include <memory>
#include <string>

#include "base/result.h"
#include "sessions/recorder.h"
#include "sessions/session_reader.h"

namespace kvscope::app {

// Where a live run records when the user did not ask to keep it: the temporary folder, named
// after this process.
std::string temporary_session_path();

class LiveRecording {
  public:
    // Reads back what `recorder` has written so far. `keep` false: the file is a temporary one,
    // removed by close().
    static Result<std::unique_ptr<LiveRecording>> open(std::unique_ptr<Recorder> recorder,
                                                       bool keep);
    ~LiveRecording();  // close(), its error dropped: say it with close() where it matters

    // Commits what the run has emitted and lets the reader see it.
    Status sync();
    Recorder& recorder() { return *recorder_; }
    SessionReader& reader() { return *reader_; }
    // Where the recording is kept ("" for a temporary one).
    std::string kept_path() const { return keep_ ? recorder_->path() : ""; }
    // Releases the reader (the recorder wants the file to itself to finish it), closes the
    // recorder and removes a temporary file. Only the first call does anything.
    Status close();

  private:
    LiveRecording() = default;
    std::unique_ptr<Recorder> recorder_;
    std::unique_ptr<SessionReader> reader_;
    bool keep_ = false;
    bool closed_ = false;
};

}  // namespace kvscope::app
