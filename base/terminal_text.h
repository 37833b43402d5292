#pragma once
// Text from files kvscope did not write itself (a session's request ids and token pieces, a
// model's vocabulary, a workload's ids) can carry terminal control sequences: colours, window
// titles, clear-screen. Everything such text passes through on its way to a terminal goes
// through here, which shows control characters instead of sending them.

#include <string>
#include <string_view>

namespace kvscope {

// C0 controls and DEL as \n, \t, \r, \x1b...; C1 controls (U+0080..U+009F) as \u009b...;
// bytes that are not UTF-8 as \xHH. A backslash stays a backslash.
std::string terminal_safe(std::string_view text);

// The same, keeping newlines and tabs: for multi-line text such as generated output.
std::string terminal_safe_multiline(std::string_view text);

// 'text' with quotes, bytes outside printable ASCII escaped as \xNN and long text cut (the first
// kMaxQuoted bytes, then "..."): names, keys and values come from files and flags, and an error
// message must stay one readable line however long what it quotes (a 50 MB JSON key).
inline constexpr size_t kMaxQuoted = 96;
std::string quote_for_message(std::string_view text);

// Serialized JSON made safe for a terminal: the serializer escapes C0 controls already; DEL
// and C1 controls (legal raw inside JSON strings) become \u007f / \u0080..\u009f.
std::string json_terminal_safe(std::string_view json);

// Streams text that arrives in pieces (one token at a time) whose UTF-8 characters may be
// split between pieces: a partial character is held back until the next piece completes it.
class TerminalTextStream {
  public:
    std::string feed(std::string_view piece);
    std::string finish();  // whatever is held back, escaped

  private:
    std::string held_;
};

}  // namespace kvscope
