// The real window under Xvfb, driven the way a user meets it: record a run, replay it, step,
// select a block, hover the heatmap, and check what the screenshots show.
#include <gtest/gtest.h>
#include <signal.h>
#include <stb_image.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "test_support.h"

namespace kvscope {
namespace {

struct Image {
    int w = 0, h = 0;
    std::vector<uint32_t> px;  // RGBA bytes packed little-endian
    uint32_t at(int x, int y) const { return px[static_cast<size_t>(y) * w + x]; }
};

Image load_png(const std::string& path) {
    Image img;
    int n = 0;
    unsigned char* data = stbi_load(path.c_str(), &img.w, &img.h, &n, 4);
    if (!data) return img;
    img.px.resize(static_cast<size_t>(img.w) * img.h);
    std::memcpy(img.px.data(), data, img.px.size() * 4);
    stbi_image_free(data);
    return img;
}

// Pixels that differ inside a rectangle given as fractions of the image.
size_t diff_in(const Image& a, const Image& b, float x0, float y0, float x1, float y1) {
    size_t n = 0;
    for (int y = static_cast<int>(y0 * a.h); y < static_cast<int>(y1 * a.h); ++y)
        for (int x = static_cast<int>(x0 * a.w); x < static_cast<int>(x1 * a.w); ++x)
            n += a.at(x, y) != b.at(x, y);
    return n;
}

size_t distinct_colors(const Image& a, float x0, float y0, float x1, float y1) {
    std::set<uint32_t> c;
    for (int y = static_cast<int>(y0 * a.h); y < static_cast<int>(y1 * a.h); ++y)
        for (int x = static_cast<int>(x0 * a.w); x < static_cast<int>(x1 * a.w); ++x)
            c.insert(a.at(x, y));
    return c.size();
}

// An X server for the whole suite: the one in DISPLAY, or an Xvfb we start.
class Display : public ::testing::Environment {
  public:
    void SetUp() override {
        if (std::getenv("DISPLAY")) return;
        if (std::system("command -v Xvfb > /dev/null 2>&1") != 0) return;
        for (int n = 90; n < 110 && pid_ == 0; ++n) {
            std::string lock = "/tmp/.X" + std::to_string(n) + "-lock";
            if (std::filesystem::exists(lock)) continue;
            pid_t pid = fork();
            if (pid == 0) {
                int devnull = open("/dev/null", O_WRONLY);
                dup2(devnull, 1);
                dup2(devnull, 2);
                std::string d = std::string(":").append(std::to_string(n));
                execlp("Xvfb", "Xvfb", d.c_str(), "-screen", "0", "1920x1080x24", "-nolisten",
                       "tcp", nullptr);
                _exit(127);
            }
            for (int i = 0;
                 i < 50 && !std::filesystem::exists("/tmp/.X11-unix/X" + std::to_string(n)); ++i)
                usleep(100000);
            pid_ = pid;
            setenv("DISPLAY", std::string(":").append(std::to_string(n)).c_str(), 1);
        }
    }
    void TearDown() override {
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, nullptr, 0);
        }
    }

  private:
    pid_t pid_ = 0;
};
const auto* const kDisplay = ::testing::AddGlobalTestEnvironment(new Display);

test::CommandResult kvscope(std::vector<std::string> args, int timeout = 180) {
    args.insert(args.begin(), test::kvscope_binary());
    return test::run_command(args, timeout);
}

class Gui : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::getenv("DISPLAY")) GTEST_SKIP() << "no X display and no Xvfb: GUI tests skipped";
        model_ = test::stories260k();
        if (!model_)
            GTEST_SKIP() << "fixture ../shared/models/stories260K/stories260K.bin not found";
        dir_ = test::temp_dir();
        // A private config dir: saved settings must not change what tests see.
        setenv("XDG_CONFIG_HOME", dir_.c_str(), 1);
        // Under ASan, Mesa's software GL driver is unloaded at exit with allocations LeakSanitizer
        // can no longer attribute (no module to suppress by). The window processes keep every
        // other ASan check; leaks of the code they share are checked by the other suites.
        if (const char* asan = std::getenv("ASAN_OPTIONS"))
            setenv("ASAN_OPTIONS", (std::string(asan) + ":detect_leaks=0").c_str(), 1);
    }
    std::string record_session(const std::string& name) {
        auto w = kvscope({"workload", "--model", *model_, "--kind", "chat", "--requests", "16",
                          "--seed", "2", "--out", dir_ + "/w.jsonl"});
        EXPECT_EQ(w.exit_code, 0) << w.err;
        std::string path = dir_ + "/" + name;
        auto r = kvscope({"run", "--model", *model_, "--workload", dir_ + "/w.jsonl",
                          "--num-blocks", "80", "--record", path, "--capture-attention", "0:*",
                          "--max-batch-tokens", "128"});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return path;
    }
    std::optional<std::string> model_;
    std::string dir_;
};

TEST_F(Gui, ReplayShowsEveryPanelAndChangesWithTheStep) {
    std::string session = record_session("s.kvs");
    auto a = kvscope({"replay", session, "--step", "6", "--screenshot", dir_ + "/a.png"});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    auto b = kvscope({"replay", session, "--step", "30", "--screenshot", dir_ + "/b.png"});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    Image ia = load_png(dir_ + "/a.png"), ib = load_png(dir_ + "/b.png");
    ASSERT_EQ(ia.w, 1600);
    ASSERT_EQ(ia.h, 900);
    // Block pool (top middle) shows several owners' colours; it changes with the step.
    EXPECT_GT(distinct_colors(ia, 0.2f, 0.05f, 0.65f, 0.3f), 8u);
    EXPECT_GT(diff_in(ia, ib, 0.2f, 0.0f, 0.7f, 0.6f), 1000u);
    // The attention heatmap (right) is not blank.
    EXPECT_GT(distinct_colors(ib, 0.72f, 0.08f, 0.98f, 0.55f), 20u);
}

TEST_F(Gui, LiveRunScriptedStepSelectAndHover) {
    std::string script = dir_ + "/s.txt";
    test::write_file(script, "step 12\nwait 2\nselect-block 2\nhover-heatmap 20 3\nscreenshot " +
                                 dir_ + "/sel.png\nselect-block -1\nscreenshot " + dir_ +
                                 "/nosel.png\nstep 3\nwait 1\nscreenshot " + dir_ +
                                 "/later.png\nquit\n");
    auto r = kvscope({"gui", "--model", *model_, "--num-blocks", "64", "--script", script});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Image sel = load_png(dir_ + "/sel.png"), nosel = load_png(dir_ + "/nosel.png"),
          later = load_png(dir_ + "/later.png");
    ASSERT_EQ(sel.w, 1600);
    // The selected block is outlined in yellow (R=255, G=255, B=0) in the block pool.
    auto yellow = [](const Image& im) {
        size_t n = 0;
        for (int y = 0; y < im.h / 3; ++y)
            for (int x = im.w / 6; x < im.w * 7 / 10; ++x)
                n += (im.at(x, y) & 0xffffff) == 0x00ffff;
        return n;
    };
    EXPECT_GT(yellow(sel), 20u);
    EXPECT_EQ(yellow(nosel), 0u);
    // Stepping the live run changes what is drawn.
    EXPECT_GT(diff_in(nosel, later, 0.17f, 0.0f, 1.0f, 0.6f), 500u);
}

TEST_F(Gui, LiveAndReplayShowTheSameStep) {
    std::string rec = dir_ + "/live.kvs";
    auto live = kvscope({"gui", "--model", *model_, "--num-blocks", "64", "--record",
                         "--record-path", rec, "--step", "9", "--screenshot", dir_ + "/live.png"});
    ASSERT_EQ(live.exit_code, 0) << live.err;
    auto check = kvscope({"check", rec});
    ASSERT_EQ(check.exit_code, 0) << check.err;
    auto replay = kvscope({"replay", rec, "--step", "9", "--screenshot", dir_ + "/replay.png"});
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    Image a = load_png(dir_ + "/live.png"), b = load_png(dir_ + "/replay.png");
    ASSERT_EQ(a.w, b.w);
    // Block pool, requests and attention must be identical; the controls differ by design
    // (live buttons vs replay buttons) and the timeline and memory plots carry timings.
    EXPECT_EQ(diff_in(a, b, 0.18f, 0.03f, 1.0f, 0.55f), 0u);
}

TEST_F(Gui, BadSessionsAndModelsGiveAMessageNotACrash) {
    std::string junk = test::write_file(dir_ + "/junk.kvs", std::string(5000, 'j'));
    auto r = kvscope({"replay", junk, "--screenshot", dir_ + "/junk.png"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.signaled);
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/junk.png"));
    auto m = kvscope({"gui", "--model", junk, "--screenshot", dir_ + "/model.png"});
    EXPECT_EQ(m.exit_code, 0) << m.err;
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/model.png"));
    // The error is written in red in the status line at the bottom.
    auto red_text = [](const Image& im) {
        size_t n = 0;
        for (int y = im.h * 97 / 100; y < im.h; ++y)
            for (int x = 0; x < im.w / 2; ++x) {
                uint32_t p = im.at(x, y);
                n += (p & 0xff) > 180 && ((p >> 8) & 0xff) < 120;
            }
        return n;
    };
    Image model_shot = load_png(dir_ + "/model.png"), junk_shot = load_png(dir_ + "/junk.png");
    ASSERT_GT(model_shot.h, 0);
    EXPECT_GT(red_text(model_shot), 100u);
    EXPECT_GT(red_text(junk_shot), 100u);
}

}  // namespace
}  // namespace kvscope
