#pragma once
// Floating-point numbers from text a user typed (a flag's value, a --kv-budget). Every parser of
// such text reads "nan", "inf" and 1e999 as numbers, and every comparison with NaN is false, so
// a range check alone lets NaN through: `--top-p nan` crashed the sampler and `--duration nan`
// never ended. Every floating-point value kvscope takes from a user comes through here.

#include <string>
#include <string_view>

#include "base/result.h"

namespace kvscope {

struct RealRange {
    double lo = 0, hi = 0;  // both included
};

// The number `text` is, whole (no spaces, no trailing characters), finite and within `range`;
// else "must be a finite number from LO to HI, not 'TEXT'" (the text quoted and cut).
Result<double> parse_real(std::string_view text, RealRange range);

// A number as a message shows it: 10000000 rather than 1e+07, 0.5, 1e-45.
std::string format_real(double value);

}  // namespace kvscope
