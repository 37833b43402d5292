#pragma once
// Records a run to a `.kvs` session file. The Recorder is a Probe: emit() stamps the event and
// queues it, and returns at once; a writer thread groups whole steps, packs their events, and
// writes them with prepared statements in batched transactions (WAL), so the engine never
// waits on the disk. A crash loses at most the batch not yet committed; the file stays valid.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probes/probe.h"
#include "probes/result.h"
#include "sessions/timeline_state.h"

namespace kvscope {

struct RecorderOptions {
    // A keyframe is written once this many events have passed since the last one.
    int64_t keyframe_events = 20000;
    // The writer commits at least this often (ms) and whenever this many steps are queued.
    int32_t flush_interval_ms = 100;
    int32_t flush_steps = 256;
};

class Recorder : public Probe {
  public:
    // Creates (or replaces) `path` and writes the run's metadata.
    static Result<std::unique_ptr<Recorder>> create(const std::string& path, const RunInfo& info,
                                                    const RecorderOptions& options = {});
    ~Recorder() override;  // flushes and closes

    void emit(Event&& event) override;
    // Blocks until everything emitted so far is committed. Returns the first write error.
    Status flush();
    // Flushes, stops the writer and closes the file.
    Status close();

    uint64_t events_written() const;
    const std::string& path() const { return path_; }

  private:
    struct Db;
    Recorder(std::string path, const RecorderOptions& options);
    void writer_loop();
    Status write_batch(std::vector<Event>& batch);
    Status write_step(std::vector<Event>& events);

    std::string path_;
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
    std::thread writer_;

    // Writer side: events of the step being gathered.
    std::vector<Event> pending_step_;
    uint64_t written_ = 0;
};

}  // namespace kvscope
