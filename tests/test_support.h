#pragma once
// Helpers shared by every test suite: where the fixtures are, and running the real binary.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::test {

// Third-party fixtures (real weights, never committed) live in one folder: $KVSCOPE_FIXTURES
// when set, else the folder CMake was given (-DKVSCOPE_FIXTURES, default tests/fixtures/).
std::string fixtures_dir();
// Path of a file in the fixtures folder, or nullopt when absent.
std::optional<std::string> fixture_file(const std::string& relative);
// Path of llama2.c's stories260K checkpoint (fixtures/stories260K/stories260K.bin).
std::optional<std::string> stories260k();
// Why a test that needs stories260K skips, for GTEST_SKIP().
std::string stories260k_missing();
// The bundled model (assets/models/kvscope-demo.gguf): part of the repository, always there.
std::string bundled_model();
// Path of a file in the source tree (e.g. "assets/models/kvscope-demo.gguf"), nullopt if absent.
std::optional<std::string> source_file(const std::string& relative);
// Path of the built kvscope executable.
std::string kvscope_binary();
// A fresh empty directory under the system temp dir, removed at process exit.
std::string temp_dir();

struct CommandResult {
    int exit_code = -1;  // exit status; 128 + signal number when killed by a signal
    bool signaled = false;
    std::string out;
    std::string err;
    int64_t peak_rss_bytes = 0;  // the command's peak resident memory (wait4's ru_maxrss)
};
// Runs argv (no shell) with a timeout in seconds; kills it on timeout (exit_code = -2).
CommandResult run_command(const std::vector<std::string>& argv, int timeout_s = 120,
                          const std::string& stdin_text = "");

// Runs the built kvscope with `args` (no shell), as run_command does.
CommandResult run_kvscope(std::vector<std::string> args, int timeout_s = 120);

// A build with AddressSanitizer reserves terabytes of address space for its shadow and keeps
// up to 256 MiB of freed blocks in a quarantine: an address-space limit (prlimit --as) stops
// such a binary before main, and its peak RSS is ASan's as much as kvscope's.
bool sanitized_build();
// argv held to `bytes` of memory: under prlimit --as normally; under ASan, through its own
// resident-memory ceiling (hard_rss_limit_mb, appended to the caller's ASAN_OPTIONS), which
// kills the command with a report past the limit, so a regression still fails the test.
std::vector<std::string> within_memory(std::vector<std::string> argv, int64_t bytes);
// The most peak RSS a command that should need `bytes` may show: `bytes` itself, and under
// ASan room for its quarantine and shadow (a command that churns through many small blocks
// showed 376 MB more than one that did not, all of it ASan's); the Release build, the README's
// test command, holds the tight bound.
int64_t peak_rss_bound(int64_t bytes);

// The bundled model quantized to Q8_0 by assets/train/quantize_demo_model.py, which the build
// makes when it finds python3 with numpy; nullopt when it did not.
std::optional<std::string> demo_q8_0_model();
// Why a test that needs it skips, for GTEST_SKIP().
std::string demo_q8_0_missing();

// Starts argv (no shell) in the background, output discarded; returns its pid.
int start_command(const std::vector<std::string>& argv);
// Waits for a background command; returns its exit status, or 128 + signal when killed.
int wait_command(int pid);

std::string write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

}  // namespace kvscope::test
