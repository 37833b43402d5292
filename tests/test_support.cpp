#include "test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace kvscope::test {

std::string fixtures_dir() {
    const char* env = std::getenv("KVSCOPE_FIXTURES");
    return env && *env ? std::string(env) : std::string(KVSCOPE_FIXTURES);
}

std::optional<std::string> fixture_file(const std::string& relative) {
    fs::path p = fs::path(fixtures_dir()) / relative;
    if (!fs::exists(p)) return std::nullopt;
    return p.string();
}

std::optional<std::string> stories260k() {
    return fixture_file("stories260K/stories260K.bin");
}

std::optional<std::string> demo_q8_0_model() {
    const std::string path = KVSCOPE_DEMO_Q8_0;
    if (path.empty() || !fs::exists(path)) return std::nullopt;
    return path;
}

std::string demo_q8_0_missing() {
    if (std::string(KVSCOPE_DEMO_Q8_0).empty())
        return "needs the Q8_0 demo model, which the build makes with python3 and numpy "
               "(Debian: python3-numpy); none was found when CMake configured";
    return std::string("needs ") + KVSCOPE_DEMO_Q8_0 +
           ", which the build makes (target demo_q8_0_model)";
}

std::string stories260k_missing() {
    return "needs llama2.c's stories260K checkpoint at " + fixtures_dir() +
           "/stories260K/stories260K.bin (set KVSCOPE_FIXTURES; README, 'Test fixtures')";
}

std::string bundled_model() {
    return (fs::path(KVSCOPE_SOURCE_DIR) / "assets/models/kvscope-demo.gguf").string();
}

std::optional<std::string> source_file(const std::string& relative) {
    fs::path p = fs::path(KVSCOPE_SOURCE_DIR) / relative;
    if (!fs::exists(p)) return std::nullopt;
    return p.string();
}

std::string kvscope_binary() {
    return KVSCOPE_BINARY;
}

namespace {
struct TempRoot {
    fs::path path;
    TempRoot() {
        std::string tmpl = (fs::temp_directory_path() / "kvscope-test-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~TempRoot() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

std::string temp_dir() {
    static TempRoot root;
    static int counter = 0;
    fs::path p = root.path / std::to_string(counter++);
    fs::create_directories(p);
    return p.string();
}

namespace {
// In a forked child: replaces the process with argv (no shell); 127 if it cannot.
[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
}
}  // namespace

CommandResult run_kvscope(std::vector<std::string> args, int timeout_s) {
    args.insert(args.begin(), kvscope_binary());
    return run_command(args, timeout_s);
}

bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

std::vector<std::string> within_memory(std::vector<std::string> argv, int64_t bytes) {
    if (!sanitized_build()) {
        argv.insert(argv.begin(), {"/usr/bin/prlimit", "--as=" + std::to_string(bytes)});
        return argv;
    }
    const char* inherited = std::getenv("ASAN_OPTIONS");
    std::string options = inherited && *inherited ? std::string(inherited) + ":" : "";
    options += "hard_rss_limit_mb=" + std::to_string(bytes >> 20);
    argv.insert(argv.begin(), {"/usr/bin/env", "ASAN_OPTIONS=" + options});
    return argv;
}

int64_t peak_rss_bound(int64_t bytes) {
    return sanitized_build() ? 4 * bytes + (int64_t{512} << 20) : bytes;
}

CommandResult run_command(const std::vector<std::string>& argv, int timeout_s,
                          const std::string& stdin_text) {
    CommandResult result;
    int out_pipe[2], err_pipe[2], in_pipe[2];
    if (pipe(out_pipe) || pipe(err_pipe) || pipe(in_pipe)) return result;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in_pipe[0], 0);
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        close(in_pipe[1]);
        close(out_pipe[0]);
        close(err_pipe[0]);
        exec_argv(argv);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    signal(SIGPIPE, SIG_IGN);
    if (!stdin_text.empty()) {
        ssize_t n = write(in_pipe[1], stdin_text.data(), stdin_text.size());
        (void)n;
    }
    close(in_pipe[1]);

    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    bool timed_out = false;
    while (open_fds > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        if (poll(fds, 2, static_cast<int>(left)) <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            } else {
                (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
            }
        }
    }
    if (timed_out) kill(pid, SIGKILL);
    for (auto& f : fds)
        if (f.fd >= 0) close(f.fd);
    int status = 0;
    struct rusage usage {};
    wait4(pid, &status, 0, &usage);
    result.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
    if (timed_out) {
        result.exit_code = -2;
    } else if (WIFSIGNALED(status)) {
        result.signaled = true;
        result.exit_code = 128 + WTERMSIG(status);
    } else {
        result.exit_code = WEXITSTATUS(status);
    }
    return result;
}

int start_command(const std::vector<std::string>& argv) {
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
        exec_argv(argv);
    }
    return pid;
}

int wait_command(int pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace kvscope::test
