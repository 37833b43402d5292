#pragma once
// The check of every floating-point flag (--temperature, --top-p, --duration, --rate, --gaps,
// --font-scale...): CLI11 reads "nan" and "inf" as numbers and its Range lets NaN through (no
// comparison with NaN is true), so a float flag takes ->check(finite_number(lo, hi)) and never
// CLI::Range. parse_real (base/real_number.h) does the checking, the same as for --kv-budget.

#include <CLI/CLI.hpp>

namespace kvscope::app {

// Accepts a whole, finite number from `lo` to `hi`; the message says that range and quotes
// (cut) what was given, after CLI11's "--flag: ".
CLI::Validator finite_number(double lo, double hi);

}  // namespace kvscope::app
