#include "engine_fixtures.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace kvscope::test {

std::shared_ptr<const LoadedModel> bundled_loaded_model() {
    static std::shared_ptr<const LoadedModel> model = [] {
        auto m = load_model(bundled_model());
        EXPECT_TRUE(m.ok()) << (m ? "" : m.error().message);
        return m ? std::make_shared<const LoadedModel>(std::move(m).value()) : nullptr;
    }();
    return model;
}

}  // namespace kvscope::test
