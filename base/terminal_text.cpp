#include "base/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace kvscope {

namespace {
// Length of the valid UTF-8 sequence at s[i] and its code point; 0 when invalid or cut short.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp) {
    auto b = static_cast<uint8_t>(s[i]);
    size_t len = b < 0x80           ? 1
                 : (b >> 5) == 0x6  ? 2
                 : (b >> 4) == 0xe  ? 3
                 : (b >> 3) == 0x1e ? 4
                                    : 0;
    if (len == 0 || i + len > s.size()) return 0;
    cp = len == 1 ? b : len == 2 ? (b & 0x1fu) : len == 3 ? (b & 0x0fu) : (b & 0x07u);
    for (size_t k = 1; k < len; ++k) {
        auto c = static_cast<uint8_t>(s[i + k]);
        if ((c & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (c & 0x3fu);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

void append_escaped(std::string& out, std::string_view s, bool keep_lines) {
    char buf[12];
    for (size_t i = 0; i < s.size();) {
        auto b = static_cast<uint8_t>(s[i]);
        if (b < 0x20 || b == 0x7f) {
            if (keep_lines && (b == '\n' || b == '\t'))
                out += static_cast<char>(b);
            else if (b == '\n')
                out += "\\n";
            else if (b == '\t')
                out += "\\t";
            else if (b == '\r')
                out += "\\r";
            else {
                std::snprintf(buf, sizeof buf, "\\x%02x", b);
                out += buf;
            }
            ++i;
            continue;
        }
        if (b < 0x80) {
            out += static_cast<char>(b);
            ++i;
            continue;
        }
        uint32_t cp = 0;
        size_t len = utf8_sequence(s, i, cp);
        if (len == 0) {
            std::snprintf(buf, sizeof buf, "\\x%02x", b);
            out += buf;
            ++i;
        } else if (cp <= 0x9f) {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            out += buf;
            i += len;
        } else {
            out.append(s.substr(i, len));
            i += len;
        }
    }
}
}  // namespace

std::string terminal_safe(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    append_escaped(out, text, false);
    return out;
}

std::string terminal_safe_multiline(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    append_escaped(out, text, true);
    return out;
}

std::string quote_for_message(std::string_view text) {
    std::string out = "'";
    for (size_t i = 0; i < text.size() && i < kMaxQuoted; ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    if (text.size() > kMaxQuoted) out += "...";
    return out + "'";
}

std::string json_terminal_safe(std::string_view json) {
    std::string out;
    out.reserve(json.size());
    char buf[8];
    for (size_t i = 0; i < json.size(); ++i) {
        auto b = static_cast<uint8_t>(json[i]);
        if (b == 0x7f) {
            out += "\\u007f";
        } else if (b == 0xc2 && i + 1 < json.size() && static_cast<uint8_t>(json[i + 1]) >= 0x80 &&
                   static_cast<uint8_t>(json[i + 1]) <= 0x9f) {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<uint8_t>(json[++i]));
            out += buf;
        } else {
            out += static_cast<char>(b);
        }
    }
    return out;
}

std::string TerminalTextStream::feed(std::string_view piece) {
    held_.append(piece);
    // Hold back a lead byte whose sequence the next piece may complete (at most 3 bytes).
    size_t keep = 0;
    for (size_t k = 1; k <= 3 && k <= held_.size(); ++k) {
        auto b = static_cast<uint8_t>(held_[held_.size() - k]);
        if ((b & 0xc0) == 0x80) continue;  // a continuation byte: look further back
        size_t need = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 1;
        if (need > k) keep = k;
        break;
    }
    std::string out;
    append_escaped(out, std::string_view(held_).substr(0, held_.size() - keep), true);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string TerminalTextStream::finish() {
    std::string out;
    append_escaped(out, held_, true);
    held_.clear();
    return out;
}

}  // namespace kvscope
