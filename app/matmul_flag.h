#pragma once
// --matmul exact|fast on every command that runs the engine (cpu_matmul.h says what each means).

#include <CLI/CLI.hpp>

#include "engine/cpu_matmul.h"

namespace kvscope::app {

void add_matmul_flag(CLI::App& sub, MatmulMode& mode);

}  // namespace kvscope::app
