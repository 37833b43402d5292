#pragma once
// Records a run to a `.kvs` session file. The Recorder is a Probe: emit() stamps the event and
// queues it, and returns at once; a writer thread groups whole steps, packs their events, and
// writes them with prepared statements in batched transactions (WAL), so the engine never
// waits on the disk. A crash loses at most the batch not yet committed; the file stays valid.
//
// The recording goes to "<path>.part" (with its -wal while running), locked against a second
// recorder, and becomes <path> by a rename only once it is closed, self-contained (no -wal)
// and its step count read back. So <path> is always either what was there before or a whole
// recording, and a crash or a failed write leaves "<path>.part" for `kvscope check --repair`.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "probes/probe.h"
#include "sessions/timeline_state.h"

namespace kvscope {

struct RecorderOptions {
    // A keyframe is written once this many events have passed since the last one.
    int64_t keyframe_events = 20000;
    // The writer commits what is queued at least this often (ms), and at every flush().
    int32_t flush_interval_ms = 100;
    // Replace a file already at the path (the user passed --force). A leftover "<path>.part"
    // from a recording that did not finish is also discarded only then.
    bool replace_existing = false;
};

class Recorder : public Probe {
  public:
    // Starts a recording that will become `path`, and writes the run's metadata. Refuses a
    // path that exists (unless options.replace_existing) or that another recorder is writing.
    static Result<std::unique_ptr<Recorder>> create(const std::string& path, const RunInfo& info,
                                                    const RecorderOptions& options = {});
    ~Recorder() override;  // flushes and closes

    void emit(Event&& event) override;
    void emit_all(std::vector<Event>& events) override;
    // Blocks until everything emitted so far is committed. Returns the first write error.
    Status flush();
    // Flushes, stops the writer, finishes the file and renames it into place. On an error the
    // message says where what was written is (the ".part" file).
    Status close();

    // True once a write has failed (disk full, I/O error): the run should stop; close() then
    // reports the error. Cheap enough to ask after every engine step.
    bool failed() const override { return failed_.load(std::memory_order_relaxed); }

    uint64_t events_written() const;
    int64_t last_step_written() const { return last_step_written_.load(); }
    const std::string& path() const { return path_; }
    // Where the recording is while it runs: "<path>.part". Readers of a live run open this.
    const std::string& recording_path() const { return part_path_; }

  private:
    struct Db;
    Recorder(std::string path, const RecorderOptions& options);
    void writer_loop();
    // Fills seq_no and t_ns where the sender left them 0.
    void stamp(Event& event);
    Status write_batch(std::vector<Event>& batch);
    Status write_step(std::vector<Event>& events);
    // COMMIT when `result` is ok (ROLLBACK otherwise); counts the steps that became durable.
    Status end_transaction(Status result);

    Status finish_file();

    std::string path_, part_path_;
    UniqueFd part_lock_;
    RecorderOptions options_;
    std::unique_ptr<Db> db_;
    TimelineState state_;  // writer-side state, for keyframes
    int64_t events_since_keyframe_ = 0;

    // Producer side (engine thread).
    uint64_t next_seq_ = 1;
    std::mutex mutex_;
    std::condition_variable wake_, flushed_;
    std::vector<Event> queue_;
    uint64_t queued_seq_ = 0, committed_seq_ = 0;
    bool flush_requested_ = false, stop_ = false;
    Status error_;
    std::atomic<bool> failed_{false};
    std::atomic<int64_t> last_step_written_{-1};  // committed
    int64_t steps_written_ = 0;                   // committed
    int64_t steps_uncommitted_ = 0, last_step_uncommitted_ = -1;
    std::thread writer_;

    // Writer side: events of the step being gathered.
    std::vector<Event> pending_step_;
    uint64_t written_ = 0;
};

}  // namespace kvscope
