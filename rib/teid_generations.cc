#include "rib/teid_generations.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "core/hash.h"

namespace sb::rib {

namespace {
constexpr char kMagic[8] = {'S', 'B', 'T', 'E', 'I', 'D', 'G', 'N'};

struct Header {
  uint32_t version = 0, node = 0, capacity = 0, index_bits = 0;
};

uint64_t header_sum(const uint8_t* b) {
  uint64_t w[3];
  std::memcpy(w, b, 24);
  return fmix64(w[0] ^ fmix64(w[1] ^ fmix64(w[2] + 0x5354454944474e31ULL)));
}

void put_header(uint8_t* b, const Header& h) {
  std::memset(b, 0, TeidGenerations::kHeaderBytes);
  std::memcpy(b, kMagic, 8);
  std::memcpy(b + 8, &h.version, 4);
  std::memcpy(b + 12, &h.node, 4);
  std::memcpy(b + 16, &h.capacity, 4);
  std::memcpy(b + 20, &h.index_bits, 4);
  const uint64_t s = header_sum(b);
  std::memcpy(b + 24, &s, 8);
}

// false: not a header this code wrote (magic, checksum).
bool get_header(const uint8_t* b, Header* h) {
  if (std::memcmp(b, kMagic, 8) != 0) return false;
  uint64_t s;
  std::memcpy(&s, b + 24, 8);
  if (s != header_sum(b)) return false;
  std::memcpy(&h->version, b + 8, 4);
  std::memcpy(&h->node, b + 12, 4);
  std::memcpy(&h->capacity, b + 16, 4);
  std::memcpy(&h->index_bits, b + 20, 4);
  return true;
}

Status errno_status(const std::string& what) { return Status::Io(what + ": " + std::strerror(errno)); }

// Writes `bytes` to path through path.tmp (0600, owner-only: it describes
// subscriber sessions as the rest of the data dir), fsync + rename + fsync
// of the directory when `sync`. A failure removes the temp file.
Status write_whole(const std::string& path, const std::vector<uint8_t>& bytes, bool sync) {
  const std::string tmp = path + ".tmp";
  (void)::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status(tmp + ": open");
  size_t done = 0;
  Status st = Status::Ok();
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      st = w < 0 ? errno_status(tmp + ": write") : Status::Io(tmp + ": write: short write");
      break;
    }
    done += size_t(w);
  }
  if (st.ok() && sync && ::fsync(fd) != 0) st = errno_status(tmp + ": fsync");
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = errno_status(path + ": rename");
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (sync) {
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, std::max<size_t>(slash, 1));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return errno_status(dir + ": open dir");
    const int r = ::fsync(dfd);
    const int e = errno;
    ::close(dfd);
    if (r != 0) return Status::Io(dir + ": fsync dir: " + std::strerror(e));
  }
  return Status::Ok();
}
}  // namespace

Result<std::unique_ptr<TeidGenerations>> TeidGenerations::open(const std::string& path, uint32_t node,
                                                               uint32_t capacity, unsigned index_bits, bool sync,
                                                               uint64_t seed, Opened* how) {
  if (capacity == 0) return Status::InvalidArgument("teid generations: capacity 0");
  const size_t bytes = kHeaderBytes + size_t(capacity) * 2;
  Opened opened = Opened::kLoaded;
  // What the file holds, if usable: its header and body.
  std::vector<uint8_t> old;
  Header oh;
  bool usable = false, exists = false;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return errno_status(path + ": open");
    if (fd >= 0) {
      exists = true;
      struct stat sb;
      if (::fstat(fd, &sb) != 0) {
        const Status st = errno_status(path + ": stat");
        ::close(fd);
        return st;
      }
      old.resize(size_t(sb.st_size));
      size_t done = 0;
      while (done < old.size()) {
        const ssize_t r = ::read(fd, old.data() + done, old.size() - done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          const Status st = errno_status(path + ": read");
          ::close(fd);
          return st;
        }
        if (r == 0) break;
        done += size_t(r);
      }
      ::close(fd);
      old.resize(done);
      if (old.size() >= kHeaderBytes && get_header(old.data(), &oh)) {
        if (oh.version != kVersion)
          return Status::FailedPrecondition(path + ": format version " + std::to_string(oh.version) +
                                            " (this version reads " + std::to_string(kVersion) +
                                            "): written by a newer version? do not downgrade");
        usable = oh.node == node && oh.index_bits == index_bits &&
                 old.size() == kHeaderBytes + size_t(oh.capacity) * 2;
      }
    }
  }
  if (!usable || oh.capacity != capacity) {
    // A new file: the common indexes of a usable one of another capacity,
    // fresh generations for the rest (header, OPEN).
    std::vector<uint8_t> nb(bytes);
    Header h{kVersion, node, capacity, uint32_t(index_bits)};
    put_header(nb.data(), h);
    uint16_t* g = reinterpret_cast<uint16_t*>(nb.data() + kHeaderBytes);
    uint32_t from = 0;
    if (usable) {
      from = std::min(capacity, oh.capacity);
      std::memcpy(g, old.data() + kHeaderBytes, size_t(from) * 2);
      opened = Opened::kResized;
    } else {
      opened = exists ? Opened::kReset : Opened::kCreated;
    }
    const unsigned gen_bits = 32 - 5 - index_bits;  // fib::SessionTable::kNodeBits = 5
    if (gen_bits < 15) {
      std::mt19937_64 rng(seed != 0 ? seed : (uint64_t(std::random_device{}()) << 32 | std::random_device{}()));
      for (uint32_t i = from; i < capacity; ++i) g[i] = uint16_t(rng());
    }
    old.clear();
    old.shrink_to_fit();
    SB_RETURN_IF_ERROR(write_whole(path, nb, sync));
  }
  std::unique_ptr<TeidGenerations> t(new TeidGenerations());
  t->path_ = path;
  t->capacity_ = capacity;
  t->sync_ = sync;
  t->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (t->fd_ < 0) return errno_status(path + ": open");
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd_, 0);
  if (m == MAP_FAILED) return errno_status(path + ": mmap");
  t->map_ = static_cast<uint8_t*>(m);
  t->map_bytes_ = bytes;
  t->gen_ = reinterpret_cast<uint16_t*>(t->map_ + kHeaderBytes);
  if (how) *how = opened;
  return t;
}

TeidGenerations::~TeidGenerations() {
  if (map_) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

Status TeidGenerations::sync() {
  if (!dirty()) return Status::Ok();
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t lo = (kHeaderBytes + size_t(dirty_lo_) * 2) / page * page;
  const size_t hi = kHeaderBytes + size_t(dirty_hi_) * 2;
  dirty_lo_ = UINT32_MAX;
  dirty_hi_ = 0;
  if (!sync_) return Status::Ok();
  if (::msync(map_ + lo, hi - lo, MS_SYNC) != 0) return errno_status(path_ + ": msync");
  return Status::Ok();
}

}  // namespace sb::rib
