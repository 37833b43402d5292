#include "base/real_number.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "base/terminal_text.h"

namespace kvscope {

Result<double> parse_real(std::string_view text, RealRange range) {
    double value = 0;
    const char* end = text.data() + text.size();
    // from_chars rather than strtod: no locale, no leading spaces or hex, no terminator needed.
    // It still reads "nan" and "inf", which isfinite refuses; 1e999 it reports out of range.
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error != std::errc() || stop != end || !std::isfinite(value) || value < range.lo ||
        value > range.hi)
        return Error{"must be a finite number from " + format_real(range.lo) + " to " +
                     format_real(range.hi) + ", not " + quote_for_message(text)};
    return value;
}

std::string format_real(double value) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.15g", value);
    return buf;
}

}  // namespace kvscope
