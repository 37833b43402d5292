#pragma once
// An immutable string held once and shared by every copy. A session interns each text once and
// its events name it by id, so one long string may be named millions of times: state rebuilt
// from them (a request's name, a token's piece) then holds it once, however often it is named,
// and what a reader holds stays bounded by what the file holds.

#include <memory>
#include <string>
#include <string_view>

namespace kvscope {

class SharedText {
  public:
    SharedText() = default;
    SharedText(std::string text)  // NOLINT: implicit, as a std::string is assigned
        : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
    SharedText(const char* text) : SharedText(std::string(text)) {}  // NOLINT

    const std::string& str() const { return text_ ? *text_ : no_text(); }
    operator const std::string&() const { return str(); }  // NOLINT
    std::string_view view() const { return str(); }
    const char* c_str() const { return str().c_str(); }
    size_t size() const { return text_ ? text_->size() : 0; }
    bool empty() const { return size() == 0; }

    // Copies of one text compare without reading it.
    friend bool operator==(const SharedText& a, const SharedText& b) {
        return a.text_ == b.text_ || a.str() == b.str();
    }
    friend bool operator==(const SharedText& a, const std::string& b) { return a.str() == b; }
    friend bool operator==(const SharedText& a, const char* b) { return a.str() == b; }

  private:
    static const std::string& no_text() {
        static const std::string none;
        return none;
    }
    std::shared_ptr<const std::string> text_;
};

}  // namespace kvscope
