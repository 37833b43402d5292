#pragma once
// Where a command's output may go: every file any command writes goes through here. kvscope
// never replaces a user's file unless asked (`--force`), never writes over one of the
// command's own inputs (even when asked), writes only regular files (open(2) on a FIFO blocks
// until a reader comes, a device may never take the bytes), and writes whole files under a
// temporary name beside the target, renamed over it only once complete: a failure, a crash or
// Ctrl-C leaves the target exactly as it was and nothing beside it.

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

// Checks, before any work is done, that `path` may take new output: its folder exists and can
// be written, it is not one of `rules.inputs`, and it is a new name, or (with `rules.force`) a
// regular file or a symbolic link to replace. A directory, a FIFO, a socket or a device is
// refused whatever the rules, saying which.
Status check_output_path(const std::string& path, const OutputRules& rules);

// A whole file written under a temporary name in the target's folder and renamed over the
// target by commit(). Until then, the temporary file is removed by the destructor and by
// SIGINT, SIGTERM, SIGHUP or SIGQUIT when the process ends on one of them (handlers installed
// for those that have none).
class OutputFile {
  public:
    static Result<std::unique_ptr<OutputFile>> create(const std::string& path,
                                                      const OutputRules& rules);
    ~OutputFile();  // removes the temporary file unless committed

    std::ostream& stream() { return out_; }
    // Flushes, syncs and renames into place; the message names the target and the reason.
    Status commit();
    const std::string& path() const { return path_; }
    // The temporary file (new and empty), for a writer that opens it by name itself (an SQLite
    // database) and writes nothing through stream(): it must close it before commit().
    const std::string& temporary_path() const { return temp_; }

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
    int cleanup_slot_ = -1;  // where the signal handlers find temp_
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
