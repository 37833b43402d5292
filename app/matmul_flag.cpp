#include "app/matmul_flag.h"

#include <string>

namespace kvscope::app {

void add_matmul_flag(CLI::App& sub, MatmulMode& mode) {
    sub.add_option_function<std::string>(
           "--matmul", [&mode](const std::string& v) { mode = *parse_matmul_mode(v); },
           "exact (weights converted to fp32, the reference) | fast (8-bit activations for "
           "Q8_0/Q4_0 weights, as llama.cpp multiplies them)")
        ->check(CLI::IsMember({"exact", "fast"}))
        ->default_str("exact");
}

}  // namespace kvscope::app
