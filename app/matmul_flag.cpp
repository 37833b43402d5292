#include "app/matmul_flag.h"

#include <map>
#include <string>

namespace kvscope::app {

void add_matmul_flag(CLI::App& sub, MatmulMode& mode) {
    static const std::map<std::string, MatmulMode> kModes = {{"exact", MatmulMode::kExact},
                                                             {"fast", MatmulMode::kFast}};
    sub.add_option("--matmul", mode,
                   "exact (weights converted to fp32, the reference) | fast (8-bit activations "
                   "for Q8_0/Q4_0/Q4_1 weights, as llama.cpp multiplies them)")
        ->transform(CLI::CheckedTransformer(kModes))
        ->default_str("exact");
}

}  // namespace kvscope::app
