// Loading the GPU probe module (probes/gpu_probes_module.h) where it cannot be: each case is a
// note saying what and why, and no probes; nothing stops the run.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>

#include <filesystem>
#include <string>

#include "probes/gpu_probes_module.h"
#include "test_support.h"

namespace kvscope {
namespace {

void expect_off(const GpuProbeStart& s, const std::string& expect) {
    EXPECT_EQ(s.probes, nullptr);
    ASSERT_EQ(s.notes.size(), 1u);
    EXPECT_EQ(s.notes[0].rfind("GPU probes off: ", 0), 0u) << s.notes[0];
    EXPECT_NE(s.notes[0].find(expect), std::string::npos) << s.notes[0];
    EXPECT_EQ(s.notes[0].find('\n'), std::string::npos) << s.notes[0];
}

TEST(GpuProbesModule, NoModuleOrNotOneIsANoteAndNoProbes) {
    const std::string dir = test::temp_dir();
    expect_off(load_gpu_probes({}, dir), "cannot load " + dir + "/libkvscope_gpu_probes.so");
    // Something else under its name: not a shared object at all.
    test::write_file(dir + "/libkvscope_gpu_probes.so", "not an ELF file\n");
    expect_off(load_gpu_probes({}, dir), "cannot load");
    // A real shared object, but not this one (a copy of the C math library this test runs
    // with): no entry points.
    Dl_info math{};
    ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::erfc)), &math), 0);
    ASSERT_NE(math.dli_fname, nullptr);
    const std::string other = test::temp_dir();
    std::filesystem::copy_file(math.dli_fname, other + "/libkvscope_gpu_probes.so");
    expect_off(load_gpu_probes({}, other), "is not kvscope's GPU probe module");
}

}  // namespace
}  // namespace kvscope
