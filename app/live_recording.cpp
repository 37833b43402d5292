#include "app/live_recording.h"

#include <unistd.h>

#include <filesystem>

namespace kvscope::app {

std::string temporary_session_path() {
    return (std::filesystem::temp_directory_path() /
            ("kvscope-live-" + std::to_string(getpid()) + ".kvs"))
        .string();
}

Result<std::unique_ptr<LiveRecording>> LiveRecording::open(std::unique_ptr<Recorder> recorder,
                                                           bool keep) {
    std::unique_ptr<LiveRecording> r(new LiveRecording());
    r->recorder_ = std::move(recorder);
    r->keep_ = keep;
    // The run info is written by now; the reader needs it committed to open the file.
    if (Status s = r->recorder_->flush(); !s) return s.error();
    auto reader = SessionReader::open(r->recorder_->recording_path());
    if (!reader) return reader.error();
    r->reader_ = std::move(reader).value();
    return r;
}

LiveRecording::~LiveRecording() {
    (void)close();
}

Status LiveRecording::sync() {
    if (Status s = recorder_->flush(); !s) return s;
    return reader_->refresh();
}

Status LiveRecording::close() {
    if (closed_) return {};
    closed_ = true;
    reader_.reset();
    Status closed = recorder_->close();
    if (!keep_) {
        std::error_code ec;
        std::filesystem::remove(recorder_->path(), ec);
    }
    return closed;
}

}  // namespace kvscope::app
