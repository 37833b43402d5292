#include "ui/saved_layout.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>

namespace kvscope::ui {

namespace {
// Window positions and sizes, and column widths, in pixels: anything past this is not a layout
// a screen could have.
constexpr long kMaxPixels = 100000;

// The integer that follows `key` at the start of `s` ("Pos=" -> 12), with its text consumed;
// false when there is none or it is out of [lo, hi].
bool take_int(std::string_view& s, std::string_view key, long lo, long hi, long& out) {
    if (s.substr(0, key.size()) != key) return false;
    s.remove_prefix(key.size());
    std::string digits;
    while (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                          (digits.empty() && (s[0] == '-' || s[0] == '+')))) {
        digits += s[0];
        s.remove_prefix(1);
        if (digits.size() > 12) return false;
    }
    if (digits.empty() || digits == "-" || digits == "+") return false;
    out = std::strtol(digits.c_str(), nullptr, 10);
    return out >= lo && out <= hi;
}

std::string check_window_line(std::string_view line) {
    long a = 0, b = 0;
    std::string_view s = line;
    for (std::string_view key : {"Pos=", "Size="})
        if (line.substr(0, key.size()) == key) {
            if (!take_int(s, key, -kMaxPixels, kMaxPixels, a) || s.empty() || s[0] != ',')
                return std::string(key) + " needs two numbers within +-100000";
            s.remove_prefix(1);
            if (!take_int(s, "", -kMaxPixels, kMaxPixels, b))
                return std::string(key) + " needs two numbers within +-100000";
            return {};
        }
    if (line.substr(0, 10) == "Collapsed=") {
        if (!take_int(s, "Collapsed=", 0, 1, a)) return "Collapsed= is not 0 or 1";
        return {};
    }
    return {};  // Dear ImGui skips lines it does not know
}

// "Column 3 UserID=0x1 Width=120 Visible=1 Order=2 Sort=0v": every figure a column's index,
// order or sort order is checked against the table's `columns`.
std::string check_table_line(std::string_view line, long columns) {
    std::string_view s = line;
    if (s.substr(0, 9) == "RefScale=") {
        const std::string v(s.substr(9));
        char* end = nullptr;
        const double scale = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || !std::isfinite(scale) || scale <= 0 || scale > 100)
            return "RefScale= is not a scale between 0 and 100";
        return {};
    }
    if (s.substr(0, 7) != "Column ") return {};
    long column = 0;
    if (!take_int(s, "Column ", 0, columns - 1, column))
        return "a column past the table's " + std::to_string(columns);
    while (!s.empty()) {
        while (!s.empty() && s[0] == ' ')
            s.remove_prefix(1);
        if (s.empty()) break;
        long v = 0;
        if (s.substr(0, 9) == "UserID=0x") {
            s.remove_prefix(9);
            size_t n = 0;
            while (n < s.size() && n <= 8 && std::isxdigit(static_cast<unsigned char>(s[n])))
                ++n;
            if (n == 0 || n > 8) return "UserID= is not a 32-bit hex number";
            s.remove_prefix(n);
        } else if (s.substr(0, 6) == "Width=") {
            if (!take_int(s, "Width=", 0, kMaxPixels, v)) return "Width= is out of range";
        } else if (s.substr(0, 7) == "Weight=") {
            s.remove_prefix(7);
            const std::string rest(s);
            char* end = nullptr;
            const double w = std::strtod(rest.c_str(), &end);
            if (end == rest.c_str() || !std::isfinite(w) || w < 0 || w > 1000)
                return "Weight= is not a weight between 0 and 1000";
            s.remove_prefix(static_cast<size_t>(end - rest.c_str()));
        } else if (s.substr(0, 8) == "Visible=") {
            if (!take_int(s, "Visible=", 0, 1, v)) return "Visible= is not 0 or 1";
        } else if (s.substr(0, 6) == "Order=") {
            if (!take_int(s, "Order=", 0, columns - 1, v))
                return "Order= is past the table's " + std::to_string(columns) + " columns";
        } else if (s.substr(0, 5) == "Sort=") {
            if (!take_int(s, "Sort=", 0, columns - 1, v) || s.empty() ||
                (s[0] != 'v' && s[0] != '^'))
                return "Sort= is not an order below " + std::to_string(columns) + " and v or ^";
            s.remove_prefix(1);
        } else {
            return "an unknown column setting";
        }
    }
    return {};
}
}  // namespace

std::string check_saved_layout(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    enum class Section { kNone, kWindow, kTable, kOther } section = Section::kNone;
    long columns = 0;
    for (int number = 1; std::getline(in, line); ++number) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const std::string where = "line " + std::to_string(number) + ": ";
        if (line.size() > 1024) return where + "longer than 1024 characters";
        for (unsigned char c : line)
            if (c < 0x20 && c != '\t') return where + "holds a control character";
        if (line.empty() || line[0] == ';') continue;
        if (line[0] == '[') {
            const size_t close = line.find(']');
            if (close == std::string::npos || close + 1 >= line.size() || line[close + 1] != '[' ||
                line.back() != ']')
                return where + "a section header is not [Type][Name]";
            const std::string type = line.substr(1, close - 1);
            const std::string name = line.substr(close + 2, line.size() - close - 3);
            if (type == "Window") {
                section = Section::kWindow;
            } else if (type == "Table") {
                unsigned id = 0;
                int n = 0, used = 0;
                if (std::sscanf(name.c_str(), "0x%8X,%d%n", &id, &n, &used) != 2 ||
                    static_cast<size_t>(used) != name.size() || n < 1 || n > kMaxLayoutTableColumns)
                    return where + "a table of " + name + " columns (1 to " +
                           std::to_string(kMaxLayoutTableColumns) + " are possible)";
                section = Section::kTable;
                columns = n;
            } else {
                section = Section::kOther;
            }
            continue;
        }
        std::string why;
        if (section == Section::kWindow) why = check_window_line(line);
        if (section == Section::kTable) why = check_table_line(line, columns);
        if (!why.empty()) return where + why;
    }
    return {};
}

}  // namespace kvscope::ui
