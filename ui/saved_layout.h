#pragma once
// The window's saved layout (Dear ImGui's imgui.ini in ~/.config/kvscope/), checked before Dear
// ImGui reads it. The file is the program's own but lives in the user's home and outlives
// versions, and Dear ImGui trusts it: a table entry with a negative or huge column count, or a
// column order past the table's columns, makes it write out of bounds before the first frame.
// Plain C++ (no ImGui include), so it is tested without a display.

#include <string>

namespace kvscope::ui {

// Dear ImGui's own bound on a table's columns (IMGUI_TABLE_MAX_COLUMNS in 1.86).
constexpr int kMaxLayoutTableColumns = 64;

// Empty when `text` holds only what Dear ImGui 1.86 reads safely: [Window][name] sections with
// Pos, Size and Collapsed in sane ranges, [Table][0xID,N] sections with 1 <= N <= 64 whose Column
// lines name columns, orders and sort orders below N, and sections of other kinds (which it
// skips). Otherwise "line L: what is wrong" for the first problem.
std::string check_saved_layout(const std::string& text);

}  // namespace kvscope::ui
