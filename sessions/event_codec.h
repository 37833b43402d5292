#pragma once
// The events of one step packed into one blob, which is how a session file stores them: one row
// per step keeps the recorder fast (one INSERT per step, not per event) and the file small
// (about ten bytes for a typical block event).
//
// Blob layout, per event:
//   u8 kind, u16 presence mask (little endian), then only the fields whose bit is set:
//   bit 0 seq_no delta (varint, from the previous event; the first is absolute)
//   bit 1 t_ns delta (zigzag varint)   bit 2 request   bit 3 block   bit 4 a   bit 5 b   bit 6 c
//   (zigzag varints)   bit 7 wide (zigzag varint)   bit 8 value (8-byte IEEE double)
//   bit 9 text (varint id into the session's string table)
//   bit 10 payload (varint length, then the bytes)
// `step` and `run` are not stored per event: the row holds them.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/shared_text.h"
#include "probes/event.h"

namespace kvscope {

class EventEncoder {
  public:
    // intern(text) returns a stable id > 0 for a string.
    explicit EventEncoder(std::function<uint32_t(const std::string&)> intern)
        : intern_(std::move(intern)) {}
    void add(const Event& e);
    const std::vector<uint8_t>& bytes() const { return out_; }
    size_t count() const { return count_; }
    void clear();

  private:
    std::function<uint32_t(const std::string&)> intern_;
    std::vector<uint8_t> out_;
    uint64_t prev_seq_ = 0;
    int64_t prev_t_ = 0;
    size_t count_ = 0;
};

// What decode_events hands on, one event at a time: the event, and its text as the session's
// shared copy (e.text stays empty: copying a long string for every event naming it would cost
// its length times the references, more than the file holds). Returns false to stop there.
using EventVisitor = std::function<bool(const Event& e, const SharedText& text)>;

// Decodes a blob event by event; strings are looked up in `strings` (index = id). Returns false
// with `error` set on any malformed or truncated input (never reads past the end); true when
// the blob was read to its end or `visit` stopped it.
bool decode_events(const uint8_t* data, size_t size, int32_t run, int64_t step,
                   const std::vector<SharedText>& strings, const EventVisitor& visit,
                   std::string& error);

// The same into `out`, each event with its own copy of its text (tests, fuzzing).
bool decode_events(const uint8_t* data, size_t size, int32_t run, int64_t step,
                   const std::vector<std::string>& strings, std::vector<Event>& out,
                   std::string& error);

}  // namespace kvscope
