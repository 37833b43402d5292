#pragma once
// What `kvscope attach` sets up and reports, in one place for its two ways of following a
// deployment: the command line's loop and the window (--gui). The flags, the attacher and
// recorder they ask for, the progress line, and at the end the per-publisher table, the
// warnings about what was lost and --summary-json.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attach/attacher.h"
#include "base/result.h"
#include "sessions/recorder.h"

namespace kvscope::app {

struct AttachFlags {
    std::vector<std::string> endpoints;
    std::vector<std::string> replay;
    std::string topic;
    std::string record;
    std::string summary_json;
    double duration = 0;
    int32_t blocks_per_rank = 65536;
    int32_t tick_ms = 100;
    int64_t max_message_bytes = int64_t{16} << 20;
    bool force = false;
};

// Refuses the output paths before anything is connected. Returns 0, or 1 with the message
// printed.
int check_attach_outputs(const AttachFlags& flags);
// The attacher the flags ask for: connected, nothing taken in yet. What it notes (a malformed
// event, an unknown field...) goes to stderr, once per kind and publisher; `before_note` (may be
// empty) is called first (a progress line clears itself).
Result<std::unique_ptr<attach::Attacher>> create_attacher(const AttachFlags& flags,
                                                          const std::function<void()>& before_note);
// A recorder of `attacher`'s session to `path`; `replace`: a file there may be replaced.
Result<std::unique_ptr<Recorder>> record_attached(const std::string& path,
                                                  const attach::Attacher& attacher, bool replace);
// The line on stderr that says attach has started; `how_it_ends`: "Ctrl-C ends it", ...
void announce_attach(const AttachFlags& flags, const std::string& how_it_ends);
// One line: publishers, events and their rate, blocks cached, gaps, batches lost.
std::string attach_progress(const std::vector<attach::PublisherStats>& stats, double seconds);
// Once attach has ended: where the recording went (or why it did not: `recording_closed`),
// why following stopped early (`followed`), the per-publisher table on stdout, what was lost,
// and --summary-json. Returns the exit status.
int report_attach(const AttachFlags& flags, const attach::Attacher& attacher,
                  const Status& recording_closed, const Status& followed, double seconds);

}  // namespace kvscope::app
