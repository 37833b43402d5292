#pragma once
// Where a command's output may go. kvscope never replaces a user's file unless asked
// (`--force`), never writes over one of the command's own inputs (even when asked), and
// writes whole files under a temporary name beside the target, renamed over it only once
// complete: a failure or a crash leaves the target exactly as it was.

#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kvscope {

struct OutputRules {
    bool force = false;                    // the user asked to replace an existing file
    std::vector<std::string> inputs = {};  // files the command reads: never an output
};

// Checks, before any work is done, that `path` may take new output: its folder exists, it is
// not a directory, not one of `rules.inputs`, and no file is there unless `rules.force`.
// A FIFO or a device (/dev/stdout, a pipe) is allowed: writing to it replaces nothing.
Status check_output_path(const std::string& path, const OutputRules& rules);

// True when `path` names something that exists and is not a regular file or directory.
bool is_stream_target(const std::string& path);

// A whole file written under a temporary name in the target's folder and renamed over the
// target by commit(). A stream target (FIFO, device) is written directly.
class OutputFile {
  public:
    static Result<std::unique_ptr<OutputFile>> create(const std::string& path,
                                                      const OutputRules& rules);
    ~OutputFile();  // removes the temporary file unless committed

    std::ostream& stream() { return out_; }
    // Flushes, syncs and renames into place; the message names the target and the reason.
    Status commit();
    const std::string& path() const { return path_; }

  private:
    // Buffered writes to a descriptor that remember the first error's errno (an ofstream
    // forgets it, and "disk full" is the message a user needs).
    class FdBuffer : public std::streambuf {
      public:
        int fd = -1;
        int error = 0;
        FdBuffer() { setp(buffer_, buffer_ + sizeof buffer_); }
        bool drain();

      protected:
        int_type overflow(int_type c) override;
        int sync() override { return drain() ? 0 : -1; }

      private:
        char buffer_[1 << 16];
    };

    OutputFile() : out_(&buffer_) {}
    std::string path_, temp_;
    bool stream_target_ = false;
    bool committed_ = false;
    FdBuffer buffer_;
    std::ostream out_;
};

Status write_output_file(const std::string& path, std::string_view bytes, const OutputRules& rules);

// `path` if nothing is there (nor a "<path>.part" recording), else the first free of
// "name-2.ext", "name-3.ext", ...: for outputs that must not replace an earlier one.
std::string first_free_path(const std::string& path);

// A name beside `path` that no other process of this machine uses: "<path>.tmp-<pid>-<n>".
std::string temporary_name_beside(const std::string& path);

// fsync of the folder holding `path`, so a rename into it survives a power cut.
void sync_parent_folder(const std::string& path);

}  // namespace kvscope
