// The saved layout's check (ui/saved_layout.h), without a display: what Dear ImGui 1.86 writes
// passes, and every entry that would make it write out of bounds is refused with its line.
#include <gtest/gtest.h>

#include "ui/saved_layout.h"

namespace kvscope::ui {
namespace {

TEST(SavedLayout, WhatDearImGuiWritesPasses) {
    const std::string written =
        "[Window][Debug##Default]\nPos=60,60\nSize=400,400\nCollapsed=0\n\n"
        "[Window][Block pool]\nPos=0,19\nSize=1124,546\nCollapsed=0\n\n"
        "[Table][0x8F7EC0A5,9]\nRefScale=13\nColumn 0  Width=60 Sort=0v\n"
        "Column 1  Weight=1.0000 Visible=1 Order=1\nColumn 8  UserID=0x0000BEEF Width=35\n\n"
        "[Docking][Data]\n; a later version's section: skipped\n";
    EXPECT_EQ(check_saved_layout(written), "");
    EXPECT_EQ(check_saved_layout(""), "");
}

TEST(SavedLayout, EntriesThatWouldWriteOutOfBoundsAreRefusedWithTheirLine) {
    const struct {
        const char* text;
        const char* says;
    } cases[] = {
        {"[Table][0x00000001,-5]\n", "line 1: a table of 0x00000001,-5 columns"},
        {"[Table][0x00000001,0]\n", "line 1"},
        {"[Table][0x00000001,100000]\n", "line 1"},
        {"[Table][0x1]\n", "line 1"},
        {"[Table][0x1,3]\nColumn 3 Width=10\n", "line 2: a column past"},
        {"[Table][0x1,3]\nColumn -1 Width=10\n", "line 2"},
        {"[Table][0x1,3]\nColumn 0 Order=70\n", "line 2: Order="},
        {"[Table][0x1,3]\nColumn 0 Sort=3v\n", "line 2: Sort="},
        {"[Table][0x1,3]\nColumn 0 Sort=1x\n", "line 2: Sort="},
        {"[Table][0x1,3]\nColumn 0 Width=99999999999\n", "line 2: Width="},
        {"[Table][0x1,3]\nColumn 0 Weight=nan\n", "line 2: Weight="},
        {"[Table][0x1,3]\nRefScale=inf\n", "line 2: RefScale="},
        {"[Table][0x1,3]\nColumn 0 Hidden=1\n", "line 2: an unknown column setting"},
        {"[Window][x]\nPos=1000000000,0\n", "line 2: Pos="},
        {"[Window][x]\nSize=10\n", "line 2: Size="},
        {"[Window][x]\nCollapsed=7\n", "line 2: Collapsed="},
        {"[Window]\n", "line 1: a section header"},
        {"[Window][a\x1b[2J]\n", "line 1: holds a control character"},
    };
    for (const auto& c : cases) {
        const std::string why = check_saved_layout(c.text);
        EXPECT_NE(why.find(c.says), std::string::npos) << c.text << " -> " << why;
    }
    EXPECT_NE(check_saved_layout(std::string(2000, 'x')).find("longer than 1024"),
              std::string::npos);
}

}  // namespace
}  // namespace kvscope::ui
