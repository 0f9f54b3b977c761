#include "direct_file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "addon_data.h"
#include "host_region.h"
#include "native_error.h"
#include "promise_worker.h"
#include "task_pool.h"

#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif

namespace agentd {

namespace {

constexpr size_t kMinAlignment = 4096;

size_t AlignDown(size_t value, size_t alignment) { return value / alignment * alignment; }
size_t AlignUp(size_t value, size_t alignment) { return AlignDown(value + alignment - 1, alignment); }

// One open file. Shared by the JavaScript wrapper and in-flight transfers;
// the descriptor is closed when the last of them lets go.
struct FileHandle {
  std::string path;
  int fd = -1;
  bool direct = false;
  std::string directReason;                // why O_DIRECT is not used; empty when it is
  size_t alignment = kMinAlignment;        // file offsets and lengths, bytes
  size_t memoryAlignment = kMinAlignment;  // buffer addresses, bytes
  std::string alignmentSource;             // "statx" or "blockSize"
  // Largest end offset of any write started, and the size before the first:
  // a read-modify-write of an unaligned tail pads the file up to the block
  // end, and is truncated back to this.
  std::mutex sizeMutex;
  uint64_t logicalSize = 0;

  ~FileHandle() {
    if (fd >= 0) close(fd);
  }
};

void DetectAlignment(FileHandle& file) {
  struct statx stx;
  std::memset(&stx, 0, sizeof stx);
  if (statx(file.fd, "", AT_EMPTY_PATH, STATX_DIOALIGN | STATX_SIZE, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0) {
    file.alignment = std::max<size_t>(kMinAlignment, stx.stx_dio_offset_align);
    file.memoryAlignment = std::max<size_t>(kMinAlignment, stx.stx_dio_mem_align);
    file.alignmentSource = "statx";
    return;
  }
  struct stat st;
  size_t block = 0;
  if (fstat(file.fd, &st) == 0) {
    int logical = 0;
    if (S_ISBLK(st.st_mode) && ioctl(file.fd, BLKSSZGET, &logical) == 0) {
      block = size_t(logical);
    } else {
      block = size_t(st.st_blksize);
    }
  }
  file.alignment = std::max(kMinAlignment, block);
  file.memoryAlignment = file.alignment;
  file.alignmentSource = "blockSize";
}

// `tryDirect` false: buffered I/O by configuration.
std::shared_ptr<FileHandle> OpenFile(const std::string& path, bool writable, bool create, bool tryDirect) {
  auto file = std::make_shared<FileHandle>();
  file->path = path;
  int flags = O_CLOEXEC | (writable ? O_RDWR : O_RDONLY) | (create ? O_CREAT : 0);
  if (!tryDirect) {
    file->directReason = "O_DIRECT disabled by configuration; using buffered I/O with fdatasync";
    file->fd = open(path.c_str(), flags, 0644);
  } else if ((file->fd = open(path.c_str(), flags | O_DIRECT, 0644)) >= 0) {
    file->direct = true;
  } else if (errno == EINVAL) {
    file->directReason =
        "the filesystem does not support O_DIRECT (open returned EINVAL); "
        "using buffered I/O with fdatasync";
    file->fd = open(path.c_str(), flags, 0644);
  }
  if (file->fd < 0) {
    int err = errno;
    throw SystemError(err == ENOENT ? "ERR_NOT_FOUND" : "ERR_IO", "open", err, "cannot open " + path);
  }
  DetectAlignment(*file);
  struct stat st;
  if (fstat(file->fd, &st) == 0) file->logicalSize = uint64_t(st.st_size);
  return file;
}

// pread until `length` bytes moved, EOF, or an error. Returns the bytes moved.
// On a regular file a short read means EOF: stop there rather than retry,
// because the retry's pointer and offset would be unaligned, which O_DIRECT
// rejects with EINVAL (a read-modify-write of a block at the end of a file
// being extended by another chunk hits exactly this).
size_t FullPread(int fd, uint8_t* data, size_t length, uint64_t offset) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = pread(fd, data + done, length - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("ERR_IO", "pread", errno, "read failed");
    done += size_t(n);
    if (size_t(n) < length - (done - size_t(n))) break;
  }
  return done;
}

void FullPwrite(int fd, const uint8_t* data, size_t length, uint64_t offset) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = pwrite(fd, data + done, length - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw SystemError("ERR_IO", "pwrite", n < 0 ? errno : EIO, "write failed");
    done += size_t(n);
  }
}

// A bounce buffer of its own anonymous mapping (page-aligned, zeroed by the
// kernel), unmapped when it goes: its memory is back with the kernel at once.
// From malloc, a freed multi-MiB buffer raises glibc's dynamic mmap threshold,
// and the next ones then come from the I/O threads' arenas, which keep their
// pages: a process that bounced every chunk of a 2 GiB file (a safetensors
// file's tensors are not aligned) held ~150 MiB more afterwards.
struct AlignedBuffer {
  AlignedBuffer(size_t bytes, size_t alignment) : bytes_(bytes) {
    if (alignment > size_t(sysconf(_SC_PAGESIZE))) {
      if (posix_memalign(reinterpret_cast<void**>(&data), alignment, bytes) != 0) {
        throw NativeError("ERR_SYSTEM", "cannot allocate a bounce buffer");
      }
      std::memset(data, 0, bytes);
      mapped_ = false;
      return;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw NativeError("ERR_SYSTEM", "cannot map a bounce buffer");
    data = static_cast<uint8_t*>(p);
  }
  ~AlignedBuffer() {
    if (mapped_) {
      munmap(data, bytes_);
    } else {
      free(data);
    }
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data = nullptr;

 private:
  size_t bytes_;
  bool mapped_ = true;
};

void ThrowReadPastEnd(uint64_t end) {
  throw NativeError("ERR_OUT_OF_RANGE",
                    "read past the end of the file (wanted up to byte " + std::to_string(end) + ")");
}

// Moves bytes between a region and a file in chunks of `blockBytes` (chunk
// boundaries at multiples of blockBytes in the file), `queueDepth` chunks in
// flight on the I/O pool. A chunk whose file offset, length or memory address
// is not aligned (an unaligned head or tail) goes through an aligned bounce
// buffer: reads read the covering blocks; writes read-modify-write them.
class TransferWorker final : public PromiseWorker {
 public:
  struct Request {
    bool write = false;
    size_t regionOffset = 0;
    uint64_t fileOffset = 0;
    size_t length = 0;
    size_t queueDepth = 1;
    size_t blockBytes = size_t(1) << 20;
    bool sync = false;
  };

  TransferWorker(Napi::Env env, std::shared_ptr<FileHandle> file, std::shared_ptr<HostRegion> region,
                 const Request& request)
      : PromiseWorker(env, request.write ? "agentd:fileWrite" : "agentd:fileRead"),
        file_(std::move(file)),
        region_(std::move(region)),
        request_(request),
        memory_(region_->Span(request.regionOffset, request.length)) {
    if (request.blockBytes == 0 || request.blockBytes % file_->alignment != 0) {
      throw NativeError("ERR_ARG_INVALID", "blockBytes must be a positive multiple of the file alignment (" +
                                               std::to_string(file_->alignment) + ")");
    }
  }

 protected:
  void Run() override {
    const Request& r = request_;
    if (r.length > 0) {
      if (r.write) {
        std::lock_guard<std::mutex> lock(file_->sizeMutex);
        file_->logicalSize = std::max<uint64_t>(file_->logicalSize, r.fileOffset + r.length);
      }
      uint64_t first = AlignDown(r.fileOffset, r.blockBytes);
      size_t chunks = (r.fileOffset + r.length - first + r.blockBytes - 1) / r.blockBytes;
      IoPool().ParallelFor(chunks, r.queueDepth, [this, first](size_t i) {
        uint64_t start = std::max<uint64_t>(request_.fileOffset, first + i * request_.blockBytes);
        uint64_t end =
            std::min<uint64_t>(request_.fileOffset + request_.length, first + (i + 1) * request_.blockBytes);
        TransferChunk(start, size_t(end - start), memory_ + (start - request_.fileOffset));
      });
      if (r.write && padded_) TrimPadding();
    }
    if (r.sync && fdatasync(file_->fd) != 0)
      throw SystemError("ERR_IO", "fdatasync", errno, "fdatasync failed");
  }

  Napi::Value Result(Napi::Env env) override {
    Napi::Object result = Napi::Object::New(env);
    result.Set("bytes", Napi::Number::New(env, double(request_.length)));
    result.Set("bouncedChunks", Napi::Number::New(env, double(bounced_.load())));
    return result;
  }

 private:
  bool Aligned(uint64_t fileOffset, size_t length, const uint8_t* memory) const {
    return fileOffset % file_->alignment == 0 && length % file_->alignment == 0 &&
           reinterpret_cast<uintptr_t>(memory) % file_->memoryAlignment == 0;
  }

  void TransferChunk(uint64_t offset, size_t length, uint8_t* memory) {
    int fd = file_->fd;
    if (!file_->direct || Aligned(offset, length, memory)) {
      if (request_.write) {
        FullPwrite(fd, memory, length, offset);
      } else if (FullPread(fd, memory, length, offset) < length) {
        ThrowReadPastEnd(offset + length);
      }
      return;
    }
    ++bounced_;
    size_t align = file_->alignment;
    uint64_t blockStart = AlignDown(offset, align);
    uint64_t blockEnd = AlignUp(offset + length, align);
    size_t span = size_t(blockEnd - blockStart);
    AlignedBuffer bounce(span, std::max(align, file_->memoryAlignment));
    size_t head = size_t(offset - blockStart);
    if (!request_.write) {
      if (FullPread(fd, bounce.data, span, blockStart) < head + length) ThrowReadPastEnd(offset + length);
      std::memcpy(memory, bounce.data + head, length);
      return;
    }
    // Read-modify-write: keep the file's bytes around the range (a short
    // read past EOF leaves zeros, trimmed afterwards).
    if (head != 0) FullPread(fd, bounce.data, align, blockStart);
    if (offset + length != blockEnd && (blockEnd - align != blockStart || head == 0)) {
      FullPread(fd, bounce.data + span - align, align, blockEnd - align);
    }
    std::memcpy(bounce.data + head, memory, length);
    FullPwrite(fd, bounce.data, span, blockStart);
    padded_ = true;
  }

  void TrimPadding() {
    std::lock_guard<std::mutex> lock(file_->sizeMutex);
    struct stat st;
    if (fstat(file_->fd, &st) != 0) throw SystemError("ERR_IO", "fstat", errno, "fstat failed");
    if (uint64_t(st.st_size) > file_->logicalSize && ftruncate(file_->fd, off_t(file_->logicalSize)) != 0) {
      throw SystemError("ERR_IO", "ftruncate", errno, "cannot trim the padded tail");
    }
  }

  std::shared_ptr<FileHandle> file_;
  std::shared_ptr<HostRegion> region_;
  Request request_;
  uint8_t* memory_;
  std::atomic<size_t> bounced_{0};
  std::atomic<bool> padded_{false};
};

class SyncWorker final : public PromiseWorker {
 public:
  SyncWorker(Napi::Env env, std::shared_ptr<FileHandle> file)
      : PromiseWorker(env, "agentd:fileSync"), file_(std::move(file)) {}

 protected:
  void Run() override {
    if (fdatasync(file_->fd) != 0) throw SystemError("ERR_IO", "fdatasync", errno, "fdatasync failed");
  }

 private:
  std::shared_ptr<FileHandle> file_;
};

Napi::Object Describe(Napi::Env env, const FileHandle& file) {
  Napi::Object info = Napi::Object::New(env);
  info.Set("path", file.path);
  info.Set("directIo", file.direct);
  info.Set("directIoReason", file.direct ? env.Null() : Napi::String::New(env, file.directReason));
  info.Set("alignment", Napi::Number::New(env, double(file.alignment)));
  info.Set("memoryAlignment", Napi::Number::New(env, double(file.memoryAlignment)));
  info.Set("alignmentSource", file.alignmentSource);
  struct stat st;
  info.Set("sizeBytes", Napi::Number::New(env, fstat(file.fd, &st) == 0 ? double(st.st_size) : 0));
  return info;
}

class NativeFile : public Napi::ObjectWrap<NativeFile> {
 public:
  static Napi::Function DefineClass(Napi::Env env) {
    return ObjectWrap<NativeFile>::DefineClass(
        env, "NativeFile",
        {InstanceMethod<&NativeFile::Read>("read"), InstanceMethod<&NativeFile::Write>("write"),
         InstanceMethod<&NativeFile::Sync>("sync"), InstanceMethod<&NativeFile::Info>("info"),
         InstanceMethod<&NativeFile::Close>("close")});
  }

  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<FileHandle> file) {
    auto handle = Napi::External<std::shared_ptr<FileHandle>>::New(env, &file);
    return GetAddonData(env).fileClass.New({handle});
  }

  explicit NativeFile(const Napi::CallbackInfo& info) : ObjectWrap<NativeFile>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw Napi::TypeError::New(info.Env(), "NativeFile is created by the addon, not by `new`");
    }
    file_ = *info[0].As<Napi::External<std::shared_ptr<FileHandle>>>().Data();
  }

 private:
  std::shared_ptr<FileHandle> Open() const {
    if (!file_) throw NativeError("ERR_RESOURCE_CLOSED", "the file was closed");
    return file_;
  }

  // read/write(region, regionOffset, fileOffset, length, queueDepth, blockBytes, sync)
  Napi::Value Transfer(const Napi::CallbackInfo& info, bool write) {
    Napi::Env env = info.Env();
    return GuardedCall(env, [&]() -> Napi::Value {
      TransferWorker::Request request;
      request.write = write;
      request.regionOffset = ToSize(info[1], "regionOffset");
      request.fileOffset = ToSize(info[2], "fileOffset");
      request.length = ToSize(info[3], "length");
      request.queueDepth = std::min(kMaxQueueDepth, std::max<size_t>(1, ToSize(info[4], "queueDepth")));
      request.blockBytes = ToSize(info[5], "blockBytes");
      request.sync = info[6].ToBoolean();
      return (new TransferWorker(env, Open(), NativeRegion::From(info[0]), request))->Start();
    });
  }

  Napi::Value Read(const Napi::CallbackInfo& info) { return Transfer(info, false); }
  Napi::Value Write(const Napi::CallbackInfo& info) { return Transfer(info, true); }

  Napi::Value Sync(const Napi::CallbackInfo& info) {
    return GuardedCall(info.Env(),
                       [&]() -> Napi::Value { return (new SyncWorker(info.Env(), Open()))->Start(); });
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    return GuardedCall(info.Env(), [&]() -> Napi::Value { return Describe(info.Env(), *Open()); });
  }

  // Idempotent; the descriptor closes when in-flight transfers finish.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    file_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<FileHandle> file_;
};

// openFile(path, writable, create, tryDirect): NativeFile
Napi::Value OpenFileJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::string path = info[0].As<Napi::String>().Utf8Value();
    return NativeFile::Wrap(env,
                            OpenFile(path, info[1].ToBoolean(), info[2].ToBoolean(), info[3].ToBoolean()));
  });
}

// probeDirectIo(probePath): the info() of a file created at `probePath` and
// removed again; tells whether that directory's filesystem takes O_DIRECT.
Napi::Value ProbeDirectIoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::string path = info[0].As<Napi::String>().Utf8Value();
    std::shared_ptr<FileHandle> file = OpenFile(path, true, true, true);
    unlink(path.c_str());
    Napi::Object result = Describe(env, *file);
    result.Delete("path");
    result.Delete("sizeBytes");
    return result;
  });
}

}  // namespace

void RegisterDirectFile(Napi::Env env, Napi::Object exports) {
  Napi::Function fileClass = NativeFile::DefineClass(env);
  GetAddonData(env).fileClass = Napi::Persistent(fileClass);
  exports.Set("NativeFile", fileClass);
  exports.Set("openFile", Napi::Function::New(env, OpenFileJs, "openFile"));
  exports.Set("probeDirectIo", Napi::Function::New(env, ProbeDirectIoJs, "probeDirectIo"));
}

}  // namespace agentd
