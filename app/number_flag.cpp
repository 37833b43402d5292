#include "app/number_flag.h"

#include "base/real_number.h"

namespace kvscope::app {

CLI::Validator finite_number(double lo, double hi) {
    const RealRange range{lo, hi};
    return CLI::Validator(
        [range](std::string& text) {
            auto value = parse_real(text, range);
            return value ? std::string() : value.error().message;
        },
        "FLOAT in [" + format_real(lo) + ", " + format_real(hi) + "]");
}

}  // namespace kvscope::app
