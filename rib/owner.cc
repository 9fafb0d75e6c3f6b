#include "rib/owner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <new>

#include "core/checksum.h"
#include "fib/session_table.h"
#include "gpt/setsep.h"

#include <chrono>

namespace sb::rib {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAdd: return "add";
    case OpKind::kModify: return "modify";
    case OpKind::kMove: return "move";
    case OpKind::kDelete: return "delete";
    case OpKind::kShow: return "show";
  }
  return "?";
}

namespace {

// A teid_ul is allocated by the handling node and encodes its id in the
// top bits (fib/session_table.h): the upstream path steers a packet to the
// node they name. An ack's teid_ul that names another node is refused.
bool teid_names(uint32_t teid_ul, uint32_t node) {
  return teid_ul >> (32 - fib::SessionTable::kNodeBits) == node;
}

// The FIB entry of record r as node `to` gets it (op batches, snapshots,
// re-pushes, compensations): with the learnt teid_ul when `to` handles the
// session, so a restarted handler restores it (FibEntry::teid_ul) whichever
// of them reaches it first. A move's or an add's record has teid_ul 0.
FibEntry fib_entry_for(const FlowKey& k, const SessionRec& r, uint32_t to) {
  FibEntry e{k, r.node, r.teid_dl, r.enb_ip, r.bearer};
  if (r.node == to && r.teid_ul != 0 && teid_names(r.teid_ul, to)) e.teid_ul = r.teid_ul;
  return e;
}

uint64_t mono_us() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

gpt::SetSepConfig setsep_config(const ClusterSpec& spec) {
  gpt::SetSepConfig c;
  c.value_bits = spec.value_bits();
  c.capacity = spec.capacity;
  c.log2_partitions = spec.log2_partitions();
  c.hash_seed = spec.hash_seed;
  c.seed = 1;
  return c;
}

// Replaces dir/name with `content` so that a crash leaves the old or the new
// file, never a torn one: tmp file, fsync, rename, fsync of the directory
// (a failure of any step is an error: the caller relies on the new content
// being durable, e.g. an epoch it is about to use). The files of a data dir
// hold subscriber data or describe it: owner-only (0600, and the umask).
// A failed write removes its temp file.
Status write_file_durably(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  // A temp file a crash left behind keeps its mode through O_TRUNC (an
  // older version's 0644): start from a new file, created 0600.
  (void)::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Io(tmp + ": open: " + std::strerror(errno));
  const char* step = nullptr;
  std::string why;
  const ssize_t w = ::write(fd, content.data(), content.size());
  if (w != ssize_t(content.size())) {
    step = "write";
    why = w < 0 ? std::strerror(errno) : "short write";
  } else if (::fsync(fd) != 0) {
    step = "fsync";
    why = std::strerror(errno);
  }
  ::close(fd);
  if (step == nullptr && ::rename(tmp.c_str(), path.c_str()) != 0) {
    step = "rename";
    why = std::strerror(errno);
  }
  if (step != nullptr) {
    ::unlink(tmp.c_str());
    return Status::Io(path + ": " + step + ": " + why);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::Io(dir + ": open dir: " + std::strerror(errno));
  const int r = ::fsync(dfd);
  const int e3 = errno;
  ::close(dfd);
  if (r != 0) return Status::Io(dir + ": fsync dir: " + std::strerror(e3));
  return Status::Ok();
}

// Takes the exclusive lock of data_dir/LOCK (flock, not blocking) and
// writes our pid into it; the descriptor holds the lock until it is closed
// (also by the kernel when the process dies).
Result<int> lock_data_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Io(dir + ": " + ec.message());
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);  // as every data dir file
  if (fd < 0) return Status::Io(path + ": open: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char b[32] = {};
    const ssize_t n = ::pread(fd, b, sizeof b - 1, 0);
    ::close(fd);
    if (e != EWOULDBLOCK) return Status::Io(path + ": flock: " + std::strerror(e));
    std::string pid = n > 0 ? std::string(b, size_t(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return Status::FailedPrecondition("data dir " + dir + " is in use by another process" +
                                      (pid.empty() ? std::string() : " (pid " + pid + ")") +
                                      ": two owners on one data dir would corrupt its log");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const int e = errno;
    ::close(fd);
    return Status::Io(path + ": write: " + std::strerror(e));
  }
  return fd;
}

// Reads, bumps and syncs data_dir/epoch.
Result<uint32_t> bump_epoch(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Io(dir + ": " + ec.message());
  const std::string path = dir + "/epoch";
  uint64_t e = 0;
  {
    std::ifstream in(path);
    if (in) {
      in >> e;
      if (!in) return Status::Corrupt(path + ": not a number");
    }
  }
  if (e >= 0xfffffffeULL) return Status::Corrupt(path + ": epoch exhausted");
  ++e;
  SB_RETURN_IF_ERROR(write_file_durably(dir, "epoch", std::to_string(e) + "\n"));
  return uint32_t(e);
}

// Writes data_dir/weights durably (tmp file, fsync, rename, fsync dir).
Status write_weights_file(const std::string& dir, uint64_t version,
                          const std::vector<std::pair<uint32_t, double>>& w) {
  std::string s = "version " + std::to_string(version) + "\n";
  char line[64];
  for (const auto& [id, wt] : w) {
    std::snprintf(line, sizeof line, "%u %.17g\n", id, wt);
    s += line;
  }
  return write_file_durably(dir, "weights", s);
}

// data_dir/identity: the cluster shape the RIB in this data dir was
// written for. Records are kept by partition; under another hash_seed,
// partition count or ownership table they belong to other partitions or
// owners, and recovery would have to drop acknowledged sessions. Under
// another key_mode every stored key is of the other kind (5-tuples vs UE
// addresses): the data plane would never look one of them up. (The
// architecture and the GPT backend are not recorded: the log holds
// neither, recovery rebuilds the GPT from the records and the nodes load
// the FIB placement from snapshots and re-pushes.)
struct Identity {
  uint64_t node = 0, hash_seed = 0, partitions = 0, ownership = 0;
  std::string key_mode;  // "5tuple" or "ue-ip"; empty: not recorded (written by an older version)
};

const char* key_mode_name(KeyMode m) { return m == KeyMode::kUeIpv4 ? "ue-ip" : "5tuple"; }

Identity identity_of(const ClusterSpec& spec, uint32_t self) {
  Identity id;
  id.node = self;
  id.hash_seed = spec.hash_seed;
  id.partitions = spec.partitions;
  std::string table;
  for (const uint32_t o : spec.owner) table.append(reinterpret_cast<const char*>(&o), 4);
  id.ownership = checksum64(table.data(), table.size());
  id.key_mode = key_mode_name(spec.key_mode);
  return id;
}

std::string identity_text(const Identity& id) {
  char b[192];
  std::snprintf(b, sizeof b, "node %llu\nhash_seed %llu\npartitions %llu\nownership %016llx\nkey_mode %s\n",
                (unsigned long long)id.node, (unsigned long long)id.hash_seed, (unsigned long long)id.partitions,
                (unsigned long long)id.ownership, id.key_mode.c_str());
  return b;
}

// Compares data_dir/identity with the configuration's; *exists = false
// when there is none yet (a new data dir, or one of an older version).
// *complete = false when it exists without key_mode (written by a version
// before that field): any key mode is accepted, and open() records the
// configuration's (see rib/README.md).
Status check_identity(const std::string& dir, const Identity& want, bool* exists, bool* complete) {
  const std::string path = dir + "/identity";
  *exists = false;
  *complete = false;
  std::ifstream in(path);
  if (!in) return Status::Ok();
  *exists = true;
  Identity got;
  bool seen[4] = {false, false, false, false};
  std::string key, val;
  while (in >> key >> val) {
    if (key == "key_mode") {
      if (val != "5tuple" && val != "ue-ip") return Status::Corrupt(path + ": key_mode: bad value '" + val + "'");
      got.key_mode = val;
      continue;
    }
    const int base = key == "ownership" ? 16 : 10;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(val.c_str(), &end, base);
    if (val.empty() || *end != '\0' || errno != 0) return Status::Corrupt(path + ": " + key + ": bad value '" + val + "'");
    uint64_t* field = key == "node"         ? &got.node
                      : key == "hash_seed"  ? &got.hash_seed
                      : key == "partitions" ? &got.partitions
                      : key == "ownership"  ? &got.ownership
                                            : nullptr;
    if (field == nullptr) return Status::Corrupt(path + ": unknown field '" + key + "'");
    *field = v;
    seen[field - &got.node] = true;
  }
  if (!in.eof()) return Status::Corrupt(path + ": unreadable");
  for (const bool b : seen)
    if (!b) return Status::Corrupt(path + ": a field is missing (node, hash_seed, partitions, ownership)");
  *complete = !got.key_mode.empty();
  const std::string tail =
      ": cluster shape changes are not supported in place (the RIB's records are kept by partition); "
      "restore the old configuration, or move the data dir (node.data_dir) away to start this node's RIB empty";
  if (got.node != want.node)
    return Status::FailedPrecondition("node.id: data dir " + dir + " holds the RIB of node " +
                                      std::to_string(got.node) + ", this is node " + std::to_string(want.node) + tail);
  if (got.hash_seed != want.hash_seed)
    return Status::FailedPrecondition("cluster.hash_seed: data dir " + dir + " was written with hash_seed " +
                                      std::to_string(got.hash_seed) + ", the configuration has " +
                                      std::to_string(want.hash_seed) + tail);
  if (got.partitions != want.partitions)
    return Status::FailedPrecondition("cluster.partitions: data dir " + dir + " was written with " +
                                      std::to_string(got.partitions) + " partitions, the configuration has " +
                                      std::to_string(want.partitions) + tail);
  if (got.ownership != want.ownership)
    return Status::FailedPrecondition("cluster.ownership: data dir " + dir +
                                      " was written under another partition ownership table (cluster.members or "
                                      "their order changed)" + tail);
  if (*complete && got.key_mode != want.key_mode)
    return Status::FailedPrecondition(
        "cluster.key_mode: data dir " + dir + " was written with key_mode " + got.key_mode +
        ", the configuration has " + want.key_mode +
        ": its sessions are keyed the other way and no packet would ever match one; key_mode cannot change in "
        "place: restore the old configuration, or empty every node's data dir (node.data_dir) and add the "
        "sessions again");
  return Status::Ok();
}

// Sessions per partition the owner's RIB maps are reserved for up front.
size_t rib_sessions_per_partition(const ClusterSpec& spec) { return size_t(spec.capacity / spec.partitions + 16); }

// The RIB of this node's partitions, sized for the cluster's capacity up
// front (no rehash pause under load): a capacity this machine cannot hold
// is a clear error, not an uncaught bad_alloc or the OOM killer.
Status check_rib_memory(const ClusterSpec& spec, uint32_t self) {
  const size_t mine = spec.partitions_of(self).size();
  uint64_t slots = 16;
  while (slots < 2 * uint64_t(rib_sessions_per_partition(spec))) slots *= 2;  // FlatMap::reserve
  const uint64_t need = slots * (sizeof(FlowKey) + sizeof(SessionRec)) * mine;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && need > uint64_t(pages) * uint64_t(page))
    return Status::Capacity("cluster.capacity: the RIB of " + std::to_string(spec.capacity) + " sessions needs " +
                            std::to_string(need >> 20) + " MiB here (" + std::to_string(mine) +
                            " partitions), more than this machine's memory (" +
                            std::to_string((uint64_t(pages) * uint64_t(page)) >> 20) +
                            " MiB): lower cluster.capacity");
  return Status::Ok();
}

// node.data_dir, or the nearest of its parents that exists, must be a
// directory: open() would fail with only "Not a directory" (exit 4, a
// restart loop). Other errors (permissions) are left to open(), which names
// the file.
Status check_data_dir_path(const std::string& data_dir) {
  std::filesystem::path p(data_dir);
  for (;;) {
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(p, ec);  // not_found also for ENOTDIR
    if (st.type() == std::filesystem::file_type::directory) return Status::Ok();
    if (st.type() == std::filesystem::file_type::not_found) {
      const std::filesystem::path up = p.parent_path();
      if (up.empty() || up == p) return Status::Ok();
      p = up;
      continue;
    }
    if (st.type() == std::filesystem::file_type::none || st.type() == std::filesystem::file_type::unknown)
      return Status::Ok();  // cannot tell (EACCES ...): open() says why
    if (p == std::filesystem::path(data_dir))
      return Status::InvalidArgument("node.data_dir: " + data_dir + " is not a directory");
    return Status::InvalidArgument("node.data_dir: " + data_dir + ": " + p.string() +
                                   " is not a directory, so the data dir cannot be created");
  }
}

}  // namespace

Status Owner::check_config(const ClusterSpec& spec, uint32_t self, const std::string& data_dir) {
  SB_RETURN_IF_ERROR(spec.validate());
  if (!spec.is_member(self)) return Status::InvalidArgument("node.id: " + std::to_string(self) + " is not a member");
  if (data_dir.empty()) return Status::InvalidArgument("node.data_dir: empty");
  SB_RETURN_IF_ERROR(check_data_dir_path(data_dir));
  SB_RETURN_IF_ERROR(check_rib_memory(spec, self));
  bool have_identity = false, complete = false;
  return check_identity(data_dir, identity_of(spec, self), &have_identity, &complete);
}

gpt::GptConfig gpt_config(const ClusterSpec& spec) {
  gpt::GptConfig c;
  c.backend = spec.gpt;
  c.value_bits = spec.value_bits();
  c.capacity = spec.capacity;
  c.log2_partitions = spec.log2_partitions();
  c.hash_seed = spec.hash_seed;
  c.seed = 1;
  return c;
}

Result<std::unique_ptr<gpt::GptBuilder>> make_cluster_gpt_builder(const ClusterSpec& spec) {
  return gpt::make_gpt_builder(gpt_config(spec));
}

Result<std::unique_ptr<gpt::GptTable>> make_cluster_gpt_table(const ClusterSpec& spec) {
  return gpt::make_gpt_table(gpt_config(spec));
}

Result<std::unique_ptr<gpt::GptBuilder>> make_setsep_builder(const ClusterSpec& spec) {
  Result<std::unique_ptr<gpt::SetSepBuilder>> b = gpt::SetSepBuilder::create(setsep_config(spec));
  if (!b.ok()) return b.status();
  return std::unique_ptr<gpt::GptBuilder>(std::move(b.value()));
}

Result<std::unique_ptr<gpt::GptTable>> make_setsep_table(const ClusterSpec& spec) {
  Result<std::unique_ptr<gpt::SetSep>> t = gpt::SetSep::create(setsep_config(spec));
  if (!t.ok()) return t.status();
  return std::unique_ptr<gpt::GptTable>(std::move(t.value()));
}

Owner::Owner(const ClusterSpec& spec, const OwnerOptions& opt, OwnerIo* io)
    : spec_(spec), opt_(opt), io_(io) {}

Owner::~Owner() {
  wal_.reset();  // the log is closed before the data dir is unlocked
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<std::unique_ptr<Owner>> Owner::open(const ClusterSpec& spec, const OwnerOptions& opt,
                                           OwnerIo* io) {
  SB_RETURN_IF_ERROR(spec.validate());
  if (!spec.is_member(opt.self)) return Status::InvalidArgument("owner: self is not a member");
  std::unique_ptr<Owner> o(new Owner(spec, opt, io));
  // Before anything in the data dir changes: a second process on it (an
  // operator's, or a supervisor's restart racing the old one) would bump
  // the epoch, cut the live segment's "torn" tail and append to the log.
  if (opt.wal.dir.empty()) return Status::InvalidArgument("owner: node.data_dir: empty");
  Result<int> lk = lock_data_dir(opt.wal.dir);
  if (!lk.ok()) return lk.status().with_context("owner");
  o->lock_fd_ = lk.value();
  o->log2p_ = spec.log2_partitions();
  for (const Member& m : spec.members) o->member_mask_ |= 1u << m.id;
  o->live_mask_ = o->member_mask_;
  std::vector<std::pair<uint32_t, double>> w;
  for (const Member& m : spec.members) w.emplace_back(m.id, m.weight);
  Result<CodeTable> ct = CodeTable::build(w);
  if (!ct.ok()) return ct.status();
  o->codes_ = ct.value();
  o->weights_ = std::move(w);
  o->recs_.assign(spec.partitions, RecMap(poison_key(), 16));
  {
    const auto mine = spec.partitions_of(opt.self);
    const size_t per = rib_sessions_per_partition(spec);
    SB_RETURN_IF_ERROR(check_rib_memory(spec, opt.self).with_context("owner"));
    try {
      for (uint32_t p : mine) o->recs_[p].reserve(per);
    } catch (const std::bad_alloc&) {
      return Status::Capacity("owner: no memory for the RIB of cluster.capacity " + std::to_string(spec.capacity) +
                              " (" + std::to_string(mine.size()) + " partitions of " + std::to_string(per) +
                              " sessions here): lower cluster.capacity or add memory");
    }
    o->done_.reserve(size_t(std::min<uint64_t>(opt.dedup_window, 1 << 20)));
  }
  o->seq_.assign(spec.partitions, 0);
  o->applied_.resize(spec.partitions);
  if (spec.architecture == Architecture::kScaleBricks) {
    if (!opt.make_gpt) return Status::InvalidArgument("owner: no GPT builder factory");
    Result<std::unique_ptr<gpt::GptBuilder>> b = opt.make_gpt(spec);
    if (!b.ok()) return b.status().with_context("owner: GPT builder");
    o->gpt_ = std::move(b.value());
  }
  // The data dir must hold this node's RIB under this cluster shape; checked
  // before anything in it changes.
  const Identity ident = identity_of(spec, opt.self);
  bool have_identity = false, identity_complete = false;
  SB_RETURN_IF_ERROR(check_identity(opt.wal.dir, ident, &have_identity, &identity_complete).with_context("owner"));
  Result<uint32_t> e = bump_epoch(opt.wal.dir);
  if (!e.ok()) return e.status();
  o->epoch_ = e.value();
  // Batch ids name the epoch: an ack of a batch the previous instance sent
  // (queued in a node's outbox, or held by a restoring node) is a stray
  // here, never taken for a batch of this instance with the same number.
  o->next_batch_ = uint64_t(o->epoch_) << 32 | 1;
  SB_RETURN_IF_ERROR(o->load_weights());
  SB_RETURN_IF_ERROR(o->recover());
  // First open (or a data dir of an older version, whose records were just
  // checked against this shape by recover(); one whose identity has no
  // key_mode yet records the configuration's from now on).
  if (!have_identity || !identity_complete)
    SB_RETURN_IF_ERROR(write_file_durably(opt.wal.dir, "identity", identity_text(ident)).with_context("owner"));
  return o;
}

Status Owner::recover() {
  Result<std::unique_ptr<Wal>> w = Wal::open(opt_.wal);
  if (!w.ok()) return w.status();
  wal_ = std::move(w.value());
  size_t foreign = 0;
  Status bad;  // the first record this cluster cannot hold (the Wal checked the format)
  SB_RETURN_IF_ERROR(wal_->recover([&](const WalRecord& r) {
    if (!bad.ok()) return;
    if (r.type == WalRecord::kPut && !spec_.is_member(r.node)) {
      bad = Status::Corrupt("owner: " + wal_->replay_where() + ": session " + r.key.to_string() + " (request id " +
                            std::to_string(r.request_id) + ") is handled by node " + std::to_string(r.node) +
                            ", which is not a member of the cluster: refusing to start");
      return;
    }
    if (r.type == WalRecord::kDone) {  // a snapshot's dedup window (rib/wal.h)
      remember(r.request_id, StatusCode::kOk, r.node);
      return;
    }
    const uint32_t p = partition_of_key(r.key);
    if (!owns(p)) { ++foreign; return; }  // the cluster shape changed under the log: refused below
    auto& m = recs_[p];
    if (r.type == WalRecord::kPut) {
      SessionRec s;
      s.key = r.key;
      s.node = r.node;
      s.teid_dl = r.teid_dl;
      s.enb_ip = r.enb_ip;
      s.bearer = r.bearer;
      // A modify keeps the handler's index, so its teid_ul (rib/wal.h).
      const SessionRec* cur = m.find(r.key);
      s.teid_ul = cur != nullptr && cur->node == r.node ? cur->teid_ul : 0;
      m.put(r.key, s);
    } else if (r.type == WalRecord::kTeid) {
      if (SessionRec* cur = m.find(r.key); cur != nullptr && cur->node == r.node) cur->teid_ul = r.teid_ul;
    } else {
      m.erase(r.key);
    }
    if (r.request_id != 0) {
      if (r.undo) forget(r.request_id);  // the op failed and was compensated
      else remember(r.request_id, StatusCode::kOk, r.node);
    }
  }));
  SB_RETURN_IF_ERROR(bad);
  // Skipping them would drop acknowledged sessions silently (and the next
  // snapshot would make it permanent).
  if (foreign > 0)
    return Status::FailedPrecondition(
        "owner: " + std::to_string(foreign) + " records of the RIB in " + opt_.wal.dir +
        " belong to partitions node " + std::to_string(opt_.self) +
        " does not own under the current cluster configuration (hash_seed, partitions, members, ownership): "
        "cluster shape changes are not supported in place; restore the old configuration, or move the data dir "
        "away to start this node's RIB empty");
  nsessions_ = 0;
  for (const auto& m : recs_) nsessions_ += m.size();
  // Rebuild the GPT of our partitions.
  if (gpt_ && nsessions_ > 0) {
    std::vector<FlowKey> keys;
    std::vector<uint8_t> vals;
    keys.reserve(nsessions_);
    vals.reserve(nsessions_);
    for (const auto& m : recs_)
      m.for_each([&](const FlowKey& k, const SessionRec& r) {
        keys.push_back(k);
        vals.push_back(uint8_t(r.node));
      });
    const Status st = gpt_->build(keys.data(), vals.data(), keys.size(), opt_.build_threads);
    // A cluster.capacity lowered below the sessions stored: say so in the
    // configuration's words, not only the GPT's ("N keys exceed the
    // configured capacity"). (Found only here: counting the stored sessions
    // takes the whole replay, so Owner::check_config cannot.)
    if (!st.ok() && nsessions_ > spec_.capacity)
      return Status::FailedPrecondition(
          "cluster.capacity: the RIB in " + opt_.wal.dir + " (node.data_dir) holds " + std::to_string(nsessions_) +
          " sessions of this node's partitions, more than cluster.capacity " + std::to_string(spec_.capacity) +
          " (" + st.message() + "): raise cluster.capacity to at least the cluster's sessions (" +
          std::to_string(nsessions_) + " here), or move the data dir away to start this node's RIB empty");
    SB_RETURN_IF_ERROR(st.with_context("owner: rebuilding the GPT"));
  }
  return Status::Ok();
}

uint32_t Owner::partition_of_key(const FlowKey& k, uint64_t* hout) const {
  const uint64_t h = hash_key(k, spec_.hash_seed);
  if (hout) *hout = h;
  return partition_of(h, log2p_);
}

uint32_t placement_mask(const ClusterSpec& spec, uint32_t live_mask, uint32_t handler, uint64_t h) {
  switch (spec.architecture) {
    case Architecture::kScaleBricks:
      return 1u << handler;
    case Architecture::kFullDuplication:
      return live_mask | (1u << handler);
    case Architecture::kHashPartition:
      return (1u << handler) | (1u << lookup_node(spec, h));
  }
  return 1u << handler;
}

uint32_t Owner::placement(const SessionRec& rec, uint64_t h) const {
  return placement_mask(spec_, live_mask_, rec.node, h);
}

void Owner::remember(uint64_t request_id, StatusCode code, uint32_t node, bool in_flight) {
  if (request_id == 0) return;
  if (Done* d = done_.find(request_id)) {  // keeps its place (and generation) in the window
    d->code = code;
    d->node = node;
    d->in_flight = in_flight;
    return;
  }
  const uint64_t gen = ++done_gen_;
  (void)done_.put(request_id, Done{code, node, in_flight, gen});
  done_order_.push_back({request_id, gen});
  // The window counts live ids. An entry of the order whose generation is
  // not the id's current one is stale (the id was forgotten, and maybe
  // remembered again later): dropping it must not evict the live entry.
  while (done_.size() > opt_.dedup_window) pop_done_front();
  // Stale entries wait for the front; compact when they are half of it
  // (every live id has exactly one entry: the others are stale).
  const size_t stale = done_order_.size() - done_.size();
  if (stale > 1024 && stale * 2 > done_order_.size()) {
    std::deque<std::pair<uint64_t, uint64_t>> live;
    for (const auto& e : done_order_)
      if (const Done* d = done_.find(e.first); d != nullptr && d->gen == e.second) live.push_back(e);
    done_order_.swap(live);
  }
}

void Owner::pop_done_front() {
  const auto [id, gen] = done_order_.front();
  done_order_.pop_front();
  if (const Done* d = done_.find(id); d != nullptr && d->gen == gen) done_.erase(id);
}

// Failed ops are not remembered: a failure leaves no state behind (it is
// rejected before the log, or compensated), so a retry with the same id
// simply runs again. Remembering it would answer every retry of an op that
// failed for a passing reason (handling node down, owner busy) with the same
// failure forever. An in-flight entry for the id is dropped.
void Owner::forget(uint64_t request_id) {
  if (request_id != 0) done_.erase(request_id);  // its entry in done_order_ is stale now
}

void Owner::reply_now(const ClientOp& op, Status st, const SessionRec* rec, uint32_t part) {
  OpReply r;
  r.token = op.token;
  r.request_id = op.request_id;
  r.full_record = op.kind == OpKind::kShow || !st.ok();
  r.status = std::move(st);
  if (rec) r.rec = *rec;
  else r.rec.key = op.s.key;
  r.partition = part;
  std::vector<OpReply> v;
  v.push_back(std::move(r));
  io_->reply(std::move(v));
}

void Owner::submit(ClientOp&& op) { queue_.push_back(std::move(op)); }

bool Owner::idle() const {
  if (!queue_.empty() || !flight_.empty() || !parked_.empty() || cleanups_pending()) return false;
  if (!member_reconcile_.empty()) return false;  // a reconcile to send (MEMBER RECONCILE)
  for (const auto& [id, w] : repush_)
    if (live_mask_ >> w.node & 1u) return false;  // re-sent until acked
  for (const auto& [p, d] : waiters_)
    if (!d.empty()) return false;
  return true;
}

Result<std::vector<std::pair<uint32_t, double>>> Owner::effective_weights(
    const std::vector<std::pair<uint32_t, double>>& w, std::string* note) const {
  note->clear();
  // The list must be valid in itself (as the coordinator that numbered it
  // checked it): ids < 32, weights finite and >= 0, not all 0, each once.
  Result<CodeTable> raw = CodeTable::build(w);
  if (!raw.ok()) return raw.status();
  uint32_t seen = 0;
  for (const auto& [id, wt] : w) {
    if (seen >> id & 1u) return Status::InvalidArgument("weights: node " + std::to_string(id) + " is listed twice");
    seen |= 1u << id;
  }
  auto fmt = [](uint32_t id, double x) {
    char b[48];
    std::snprintf(b, sizeof b, " %u=%g", id, x);
    return std::string(b);
  };
  std::vector<std::pair<uint32_t, double>> out;
  std::string dropped, added;
  double sum = 0;
  for (const auto& [id, wt] : w) {
    if (!spec_.is_member(id)) {
      dropped += fmt(id, wt);
      continue;
    }
    out.emplace_back(id, wt);
    sum += wt;
  }
  for (const Member& m : spec_.members) {
    if (seen >> m.id & 1u) continue;
    out.emplace_back(m.id, m.weight);
    added += fmt(m.id, m.weight);
    sum += m.weight;
  }
  auto say = [note](const std::string& s) { *note += (note->empty() ? "" : "; ") + s; };
  if (!dropped.empty()) say("not members of the cluster, dropped:" + dropped);
  if (!added.empty()) say("members it does not list, at their configured weight:" + added);
  if (!(sum > 0)) {
    out.clear();
    for (const Member& m : spec_.members) out.emplace_back(m.id, m.weight);
    say("that leaves every weight 0: the configuration's weights are used");
  }
  return out;
}

Status Owner::set_weights(uint64_t version, const std::vector<std::pair<uint32_t, double>>& w, bool* changed) {
  if (changed) *changed = false;
  std::string note;
  Result<std::vector<std::pair<uint32_t, double>>> eff = effective_weights(w, &note);
  if (!eff.ok()) return eff.status();
  Result<CodeTable> ct = CodeTable::build(eff.value());
  if (!ct.ok()) return ct.status();
  if (version <= weights_version_) return Status::Ok();
  SB_RETURN_IF_ERROR(write_weights_file(opt_.wal.dir, version, w));
  codes_ = ct.value();
  weights_version_ = version;
  weights_ = std::move(eff.value());
  weights_note_ = std::move(note);
  if (changed) *changed = true;
  return Status::Ok();
}

// data_dir/weights: "version V" then one "node weight" line per node of the
// list the cluster agreed on for V (the members of the configuration it was
// set under). Used through effective_weights(): a member removed from or
// added to the configuration since is not an error (set_weights).
Status Owner::load_weights() {
  const std::string path = opt_.wal.dir + "/weights";
  std::ifstream in(path);
  if (!in) return Status::Ok();  // never changed: the configuration's weights
  std::string word;
  uint64_t v = 0;
  if (!(in >> word >> v) || word != "version") return Status::Corrupt(path + ": no version line");
  std::vector<std::pair<uint32_t, double>> w;
  uint32_t id;
  double wt;
  while (in >> id >> wt) w.emplace_back(id, wt);
  if (!in.eof()) return Status::Corrupt(path + ": bad weight line");
  std::string note;
  Result<std::vector<std::pair<uint32_t, double>>> eff = effective_weights(w, &note);
  if (!eff.ok()) return Status::Corrupt(path + ": " + eff.status().message());
  Result<CodeTable> ct = CodeTable::build(eff.value());
  if (!ct.ok()) return ct.status().with_context(path);
  codes_ = ct.value();
  weights_version_ = v;
  weights_ = std::move(eff.value());
  weights_note_ = std::move(note);
  return Status::Ok();
}

void Owner::set_live(uint32_t node, bool live, uint64_t now_us) {
  if (node >= kMaxNodes || !(member_mask_ >> node & 1u)) return;
  const uint32_t before = live_mask_;
  if (live) live_mask_ |= 1u << node;
  else live_mask_ &= ~(1u << node);
  if (before != live_mask_ && !live) {
    std::vector<uint32_t> parts;
    for (const auto& [p, d] : waiters_) parts.push_back(p);
    for (uint32_t p : parts) check_converged(p, now_us);
  }
  // A member back after it was seen down may have missed FIB batches (ops
  // that left it out while it was down: a full-duplication copy of a
  // session deleted meanwhile would stay for good). A reconciling re-push
  // of our partitions to it repairs that (installs are idempotent; a
  // restarted member gets what its snapshots also bring).
  // Its GPT may have missed our deltas too (a move away from it): the
  // reconcile waits until it applied our current heads (MEMBER RECONCILE).
  if (before != live_mask_ && live && node != opt_.self && repushed_) {
    for (auto it = repush_.begin(); it != repush_.end();)
      it = it->second.node == node ? repush_.erase(it) : std::next(it);
    ++stats_.member_repushes;
    bool behind = reconcile_held_;  // (held: maybe_reconcile reconciles every live member)
    if (!reconcile_held_) {
      MemberReconcile mr;
      mr.deadline_us = now_us + kRepushAckWait * opt_.fib_timeout_ms * 1000;
      for (const uint32_t p : spec_.partitions_of(opt_.self)) {
        const StreamPos head{epoch_, seq_[p]};
        if (applied_[p][node] < head) mr.targets.emplace_back(p, head);
      }
      if (!mr.targets.empty()) {
        behind = true;
        member_reconcile_[node] = std::move(mr);
        ++stats_.member_reconciles_held;
      }
    }
    // Up to date in every partition of ours: one reconciling re-push.
    // Behind: plain installs now, the reconcile once it caught up.
    repush_to(node, now_us, !behind);
  }
  if (before != live_mask_ && !live) {
    member_reconcile_.erase(node);  // seen live again: a new re-push
    maybe_reconcile(now_us);        // one fewer to wait for
  }
}

void Owner::maybe_reconcile_member(uint32_t node, uint64_t now_us) {
  const auto it = member_reconcile_.find(node);
  if (it == member_reconcile_.end()) return;
  if (now_us < it->second.deadline_us) {
    for (const auto& [p, pos] : it->second.targets)
      if (applied_[p][node] < pos) return;
  } else {
    ++stats_.member_reconcile_timeouts;
  }
  member_reconcile_.erase(it);
  repush_to(node, now_us, true);
}

StreamPos Owner::min_applied(uint32_t partition) const {
  StreamPos m{epoch_, seq_[partition]};
  for (uint32_t n = 0; n < kMaxNodes; ++n)
    if ((live_mask_ >> n & 1u) && n != opt_.self && applied_[partition][n] < m) m = applied_[partition][n];
  return m;
}

bool Owner::converged(uint32_t partition, StreamPos pos) const {
  for (uint32_t n = 0; n < kMaxNodes; ++n) {
    if (!(live_mask_ >> n & 1u) || n == opt_.self) continue;  // the owner applies its own deltas at publish
    if (applied_[partition][n] < pos) return false;
  }
  return true;
}

void Owner::on_applied(uint32_t node, uint32_t partition, StreamPos pos, uint64_t now_us) {
  if (node >= kMaxNodes || partition >= spec_.partitions || !owns(partition)) return;
  if (pos.epoch != epoch_) return;  // a report about an old stream of ours
  // Nobody can have applied more than we published: a position beyond our
  // head is about an old stream with the same epoch (this owner restarted
  // from a restored or empty data dir), and would "converge" moves early.
  if (pos.seq > seq_[partition]) return;
  StreamPos& a = applied_[partition][node];
  if (a < pos) a = pos;
  check_converged(partition, now_us);
  maybe_reconcile(now_us);
  maybe_reconcile_member(node, now_us);
}

void Owner::maybe_reconcile(uint64_t now_us) {
  if (!reconcile_held_) return;
  if (now_us < reconcile_deadline_us_)
    for (const uint32_t p : spec_.partitions_of(opt_.self))
      if (!converged(p, StreamPos{epoch_, 0})) return;
  reconcile_held_ = false;
  member_reconcile_.clear();  // every live member is reconciled now
  for (const Member& m : spec_.members)
    if ((live_mask_ >> m.id & 1u) || m.id == opt_.self) repush_to(m.id, now_us, true);
}

void Owner::check_converged(uint32_t partition, uint64_t now_us) {
  auto it = waiters_.find(partition);
  if (it == waiters_.end()) return;
  std::deque<Waiter>& d = it->second;
  std::unordered_map<uint32_t, FibBatch> removes;
  while (!d.empty() && converged(partition, d.front().pos)) {
    const Waiter& w = d.front();
    lat_converge_.add(now_us - w.t0_us);
    if (w.remove_mask) {
      // Never remove an entry the current state (or the group in flight) still needs.
      uint32_t keep = 0;
      uint64_t h = 0;
      const uint32_t p = partition_of_key(w.key, &h);
      if (const SessionRec* r = find(w.key)) keep |= placement(*r, h);
      if (const Op* g = in_flight(w.key)) keep |= g->install_mask;
      (void)p;
      for (uint32_t m = w.remove_mask & ~keep; m; m &= m - 1) {
        const uint32_t n = uint32_t(std::countr_zero(m));
        if (!(live_mask_ >> n & 1u) && applied_[partition][n] < w.pos) {
          // Not live, so convergence did not wait for it: when it is back,
          // its GPT may still steer the session to itself. The remove
          // waits until it applied the move (CLEANUPS, `after`).
          CleanupItem& ci = cleanup_[n][w.key];
          ci = CleanupItem{0, false, w.pos};
          ++stats_.removes_held;
          continue;
        }
        removes[n].remove.push_back(w.key);
      }
      if (w.remove_mask & ~keep) ++stats_.removes_after_converge;  // (a move back kept them all)
    }
    d.pop_front();
  }
  for (auto& [n, b] : removes) send_cleanup(n, std::move(b), now_us);
  if (d.empty()) waiters_.erase(it);
}

const SessionRec* Owner::find(const FlowKey& k) const {
  const uint32_t p = partition_of_key(k);
  return recs_[p].find(k);
}

void Owner::for_each(const std::function<void(const SessionRec&)>& f) const {
  for (const auto& m : recs_) m.for_each([&](const FlowKey&, const SessionRec& r) { f(r); });
}

Result<SnapshotOut> Owner::snapshot(uint32_t partition, uint32_t for_node) const {
  if (partition >= spec_.partitions) return Status::InvalidArgument("snapshot: partition out of range");
  if (!owns(partition)) return Status::InvalidArgument("snapshot: partition " + std::to_string(partition) + " is not owned here");
  SnapshotOut out;
  out.partition = partition;
  out.pos = head(partition);
  if (gpt_) SB_RETURN_IF_ERROR(gpt_->serialize_partition(partition, &out.gpt));
  fib_entries_for(partition, for_node, &out.fib);
  return out;
}

void Owner::fib_entries_for(uint32_t partition, uint32_t for_node, std::vector<FibEntry>* out_fib) const {
  std::vector<FibEntry>& fib = *out_fib;
  // FIB entries as they will be once the group in flight lands: its FIB
  // messages were sent before this answer, so a removal in flight must not
  // be undone by the snapshot (snapshots only add).
  recs_[partition].for_each([&](const FlowKey& k, const SessionRec& r) {
    if (in_flight(k)) return;
    uint64_t h = hash_key(k, spec_.hash_seed);
    if (placement(r, h) >> for_node & 1u) fib.push_back(fib_entry_for(k, r, for_node));
  });
  for (const Group& grp : flight_)
    for (const Op& g : grp.ops) {
      if (g.part != partition || g.erase) continue;
      if (g.install_mask >> for_node & 1u)
        fib.push_back(fib_entry_for(g.now.key, g.now, for_node));
      else if (g.in.kind == OpKind::kMove && g.had_old && (placement(g.old, g.h) >> for_node & 1u))
        // A move in flight away from this node: the GPT (this snapshot's
        // and the stream's until the move commits) still sends the key
        // here, and if the move fails nothing reinstalls it here. The old
        // entry is removed only after convergence, which waits for this
        // node to apply the move's delta, so after this snapshot. (Not for
        // a modify: the old tunnel would stay here after it commits. A
        // node the modify did not install at gets its entry when it
        // commits: finish, members the group did not install at.)
        fib.push_back(fib_entry_for(g.old.key, g.old, for_node));
    }
  // Moves away from this node that committed but have not converged: a
  // node that has not applied the move's delta yet still steers the key
  // here, and this node keeps the old entry until convergence (its removal
  // follows this snapshot on the same channel).
  if (const auto it = waiters_.find(partition); it != waiters_.end())
    for (const Waiter& w : it->second) {
      if (!(w.remove_mask >> for_node & 1u) || in_flight(w.key)) continue;
      const uint64_t h = hash_key(w.key, spec_.hash_seed);
      if (const SessionRec* r = recs_[partition].find(w.key); r != nullptr && (placement(*r, h) >> for_node & 1u))
        continue;  // the current record is here anyway (e.g. moved back)
      fib.push_back(fib_entry_for(w.old.key, w.old, for_node));
    }
}

void Owner::send_repush(uint32_t n, FibBatch&& fb, uint64_t now_us, bool reconcile) {
  fb.batch_id = next_batch_++;
  fb.owner = opt_.self;
  RepushWait& w = repush_[fb.batch_id];
  w.node = n;
  w.sent_us = now_us;
  w.partitions = fb.reconcile;
  w.reconcile = reconcile;
  if (!reconcile) fb.reconcile.clear();
  w.keys.reserve(fb.install.size());
  for (const FibEntry& e : fb.install) w.keys.push_back(e.key);
  ++stats_.repush_batches;
  io_->send_fib(n, std::move(fb));
}

void Owner::repush(uint64_t now_us) {
  // RECONCILE: installs now, the reconcile once the members resynced.
  reconcile_held_ = true;
  reconcile_deadline_us_ = now_us + kRepushAckWait * opt_.fib_timeout_ms * 1000;
  for (const Member& m : spec_.members) repush_to(m.id, now_us, false);
  maybe_reconcile(now_us);  // no partition, or no other live member
}

void Owner::repush_to(uint32_t node, uint64_t now_us, bool reconcile) {
  // Reconciling batches: every entry of our partitions `node` should hold
  // (what a snapshot would carry: fib_entries_for); it drops the rest of
  // those partitions. A batch is self-contained (it reconciles exactly the
  // partitions whose entries it carries), so the re-push is cut at
  // partition boundaries into batches of about OwnerOptions::repush_chunk
  // entries: a big RIB does not become one message beyond the frame limit,
  // and each ack stays within the acks' limit.
  FibBatch b;
  for (const uint32_t p : spec_.partitions_of(opt_.self)) {
    fib_entries_for(p, node, &b.install);
    b.reconcile.push_back(p);
    if (b.install.size() >= std::max<uint32_t>(1, opt_.repush_chunk)) {
      send_repush(node, std::move(b), now_us, reconcile);
      b = FibBatch{};
    }
  }
  if (!b.reconcile.empty()) send_repush(node, std::move(b), now_us, reconcile);
}

Status Owner::pump(uint64_t now_us) {
  // A log write that failed outside pump() (compensation records, a
  // snapshot): the owner stops taking ops; the caller stops the node.
  if (!fatal_.ok()) return fatal_;
  if (!repushed_) {
    repushed_ = true;
    repush_deadline_us_ = now_us + kRepushAckWait * opt_.fib_timeout_ms * 1000;
    repush(now_us);
  }
  if (!repush_.empty()) {
    // Unacked re-push batches: to a live node, built again from the
    // current state and re-sent; to one that is not, forgotten at the
    // deadline (RepushWait).
    std::vector<uint64_t> again;
    for (auto it = repush_.begin(); it != repush_.end();) {
      const RepushWait& w = it->second;
      if (!(live_mask_ >> w.node & 1u)) {
        if (now_us >= repush_deadline_us_) {
          ++stats_.repush_timeouts;
          it = repush_.erase(it);
          continue;
        }
      } else if (now_us - w.sent_us >= uint64_t(opt_.fib_timeout_ms) * 1000) {
        again.push_back(it->first);
      }
      ++it;
    }
    for (const uint64_t id : again) {
      const auto it = repush_.find(id);
      const uint32_t n = it->second.node;
      const bool reconcile = it->second.reconcile;
      FibBatch b;
      b.reconcile = std::move(it->second.partitions);
      repush_.erase(it);
      for (const uint32_t p : b.reconcile) fib_entries_for(p, n, &b.install);
      ++stats_.repush_resends;
      send_repush(n, std::move(b), now_us, reconcile);
    }
  }
  maybe_reconcile(now_us);  // the deadline (RECONCILE)
  if (!member_reconcile_.empty()) {  // the deadlines (MEMBER RECONCILE)
    std::vector<uint32_t> due;
    for (const auto& [n, mr] : member_reconcile_)
      if (now_us >= mr.deadline_us) due.push_back(n);
    for (const uint32_t n : due) maybe_reconcile_member(n, now_us);
  }
  if (!parked_.empty()) answer_parked();
  if (now_us >= cleanup_retry_us_ && cleanups_pending()) retry_cleanups(now_us);
  while (!flight_.empty() && now_us - flight_.front().t0_us > uint64_t(opt_.fib_timeout_ms) * 1000)
    fail_timeouts(now_us);
  if (!fatal_.ok()) return fatal_;  // finishing those groups failed the log: start nothing more
  // FsyncPolicy::kInterval: the last writes are synced once the interval
  // has passed, whether or not groups are in flight: a group already acked
  // must not stay unsynced while a later one waits up to fib_timeout_ms for
  // a slow node (a no-op under kBatch / kNone or when clean; nothing is
  // pending between calls, every group commits in the call that builds it).
  // A log error here is fatal as well: every later call returns it.
  if (Status c = wal_->commit(); !c.ok()) return fatal_ = c;
  while (can_start())
    if (Status g = start_group(now_us); !g.ok()) return fatal_ = g;
  // No group took them (a quiet owner, a re-push's acks): a commit of
  // their own, so the log never keeps records pending between calls.
  if (!teid_log_.empty()) {
    flush_teid_log();
    if (Status c = wal_->commit(); !c.ok()) return fatal_ = c;
  }
  return Status::Ok();
}

void Owner::send_cleanup(uint32_t n, FibBatch&& b, uint64_t now_us) {
  // A batch is at most repush_chunk entries (half the validator's max_ops):
  // the removes held for a member cut off while many moves converged, or
  // many moves converging at once, would otherwise make one batch every
  // node refuses, rebuilt at the same size at each retry, for good.
  const size_t cap = std::max<uint32_t>(1, opt_.repush_chunk);
  if (b.install.size() + b.remove.size() > cap) {
    FibBatch part;
    auto flush = [&] {
      send_cleanup(n, std::move(part), now_us);
      part = FibBatch{};
    };
    for (FibEntry& e : b.install) {
      part.install.push_back(std::move(e));
      if (part.install.size() + part.remove.size() == cap) flush();
    }
    for (FlowKey& k : b.remove) {
      part.remove.push_back(k);
      if (part.install.size() + part.remove.size() == cap) flush();
    }
    if (!part.install.empty() || !part.remove.empty()) flush();
    return;
  }
  b.batch_id = next_batch_++;
  b.owner = opt_.self;
  auto& items = cleanup_[n];
  for (const FibEntry& e : b.install) items[e.key] = CleanupItem{b.batch_id, true};
  for (const FlowKey& k : b.remove) items[k] = CleanupItem{b.batch_id, false};
  if (cleanup_batches_.empty()) cleanup_retry_us_ = now_us + uint64_t(opt_.fib_timeout_ms) * 1000;
  CleanupBatch& cb = cleanup_batches_[b.batch_id];
  cb.node = n;
  cb.sent_us = now_us;
  cb.installs.reserve(b.install.size());
  for (const FibEntry& e : b.install) cb.installs.push_back(e.key);
  io_->send_fib(n, std::move(b));
}

void Owner::retry_cleanups(uint64_t now_us) {
  const uint64_t timeout = uint64_t(opt_.fib_timeout_ms) * 1000;
  cleanup_retry_us_ = now_us + timeout;
  // Batches unacked for fib_timeout_ms to live nodes: their items are sent
  // again (a node that is not live keeps them until it is).
  std::vector<uint64_t> expired;
  for (const auto& [id, ns] : cleanup_batches_)
    if (now_us - ns.sent_us >= timeout && (live_mask_ >> ns.node & 1u)) expired.push_back(id);
  for (const uint64_t id : expired) cleanup_batches_.erase(id);
  uint32_t nodes = 0;
  for (uint32_t n = 0; n < kMaxNodes; ++n)
    if (!cleanup_[n].empty() && (live_mask_ >> n & 1u)) nodes |= 1u << n;
  for (uint32_t m = nodes; m; m &= m - 1) {
    const uint32_t n = uint32_t(std::countr_zero(m));
    auto& items = cleanup_[n];
    FibBatch b;
    for (auto i = items.begin(); i != items.end();) {
      const FlowKey k = i->first;
      CleanupItem& it = i->second;
      if (it.batch != 0 && cleanup_batches_.count(it.batch)) { ++i; continue; }  // still within its timeout
      if (in_flight(k)) {  // the op in flight decides (its own batch, or its undo)
        it.batch = 0;
        ++i;
        continue;
      }
      uint64_t h = 0;
      const uint32_t p = partition_of_key(k, &h);
      if (applied_[p][n] < it.after) {  // a held remove: n has not applied the move yet
        ++i;
        continue;
      }
      const SessionRec* r = recs_[p].find(k);
      const bool wanted = r != nullptr && (placement(*r, h) >> n & 1u);
      bool waiter = false;  // a later move away from n removes it once converged
      if (const auto w = waiters_.find(p); w != waiters_.end())
        for (const Waiter& x : w->second) waiter |= x.key == k && (x.remove_mask >> n & 1u);
      if (wanted && it.install) b.install.push_back(fib_entry_for(k, *r, n));
      else if (!wanted && !waiter) b.remove.push_back(k);
      i = items.erase(i);
    }
    if (b.install.empty() && b.remove.empty()) continue;
    ++stats_.cleanup_resends;
    send_cleanup(n, std::move(b), now_us);
  }
}

bool Owner::cleanups_pending() const {
  for (uint32_t n = 0; n < kMaxNodes; ++n)
    if (!cleanup_[n].empty() && (live_mask_ >> n & 1u)) return true;
  return false;
}

bool Owner::repush_pending_for(const FlowKey& k) const {
  // A deleted session: the reconcile of every node removes its entry.
  uint32_t mask = member_mask_;
  uint64_t h = 0;
  partition_of_key(k, &h);
  const SessionRec* r = find(k);
  if (r == nullptr && reconcile_held_) return true;  // its reconcile is not sent yet (RECONCILE)
  if (repush_.empty()) return false;
  if (r != nullptr) mask = placement(*r, h);
  mask &= live_mask_;  // a node that is not live resyncs when it returns
  for (const auto& [id, w] : repush_)
    if (mask >> w.node & 1u) return true;
  return false;
}

void Owner::answer_parked() {
  std::vector<ClientOp> still;
  for (ClientOp& op : parked_) {
    if (repush_pending_for(op.s.key)) {
      still.push_back(std::move(op));
      continue;
    }
    reply_now(op, Status::Ok(), find(op.s.key), partition_of_key(op.s.key));
  }
  parked_.swap(still);
}

void Owner::note_teid(const FlowKey& k, uint32_t node, uint32_t teid_ul) {
  if (!opt_.log_teid_ul) return;
  WalRecord r;
  r.type = WalRecord::kTeid;
  r.key = k;
  r.node = node;
  r.teid_ul = teid_ul;
  teid_log_.push_back(r);
}

void Owner::flush_teid_log() {
  for (const WalRecord& r : teid_log_) wal_->append(r);
  teid_log_.clear();
}

const Owner::Op* Owner::in_flight(const FlowKey& k) const {
  for (const Group& g : flight_)
    if (const uint32_t* i = g.keys.find(k)) return &g.ops[*i];
  return nullptr;
}

bool Owner::snapshot_due() const { return wal_->records_since_snapshot() >= opt_.snapshot_every; }

bool Owner::can_start() const {
  if (queue_.empty() || flight_.size() >= std::max<uint32_t>(1, opt_.max_groups_in_flight)) return false;
  if (!flight_.empty() && snapshot_due()) return false;  // drain first, then snapshot
  return in_flight(queue_.front().s.key) == nullptr;
}

Status Owner::start_group(uint64_t now_us) {
  Group grp;
  if (!spare_.empty()) {
    grp = std::move(spare_.back());
    spare_.pop_back();
  } else {
    grp.keys.reserve(std::min<uint32_t>(opt_.max_group_ops, 1 << 16));
  }
  grp.ops.clear();
  grp.keys.clear();
  grp.acks.clear();
  std::vector<Op>& ops = grp.ops;
  auto& keys = grp.keys;
  while (!queue_.empty() && ops.size() < opt_.max_group_ops) {
    ClientOp& in = queue_.front();
    uint64_t h = 0;
    const uint32_t p = partition_of_key(in.s.key, &h);
    // Cut: per-key order (the op waits for the op on its key in flight).
    if (keys.contains(in.s.key) || in_flight(in.s.key)) break;
    ClientOp op = std::move(in);
    queue_.pop_front();
    if (!owns(p)) {
      ++stats_.wrong_owner;
      reply_now(op, Status::InvalidArgument("partition " + std::to_string(p) + " is not owned by node " +
                                            std::to_string(opt_.self)), nullptr, p);
      continue;
    }
    if (op.kind == OpKind::kShow) {
      const SessionRec* r = find(op.s.key);
      reply_now(op, r ? Status::Ok() : Status::NotFound("unknown session " + op.s.key.to_string()), r, p);
      continue;
    }
    if (op.request_id != 0) {
      const Done* d = done_.find(op.request_id);
      if (d != nullptr) {
        ++stats_.ops_deduped;
        if (d->in_flight) {  // the first copy is in the group in flight
          inflight_ids_[op.request_id].push_back(std::move(op));
          ++retries_waiting_;
          continue;
        }
        if (d->code == StatusCode::kOk && repush_pending_for(op.s.key)) {
          parked_.push_back(std::move(op));  // answered by answer_parked()
          continue;
        }
        const SessionRec* r = find(op.s.key);
        Status st = d->code == StatusCode::kOk ? Status::Ok() : Status(d->code, "retry of a failed request");
        reply_now(op, st, r, p);
        continue;
      }
    }
    Op g;
    g.h = h;
    g.part = p;
    const SessionRec* cur = recs_[p].find(op.s.key);
    g.had_old = cur != nullptr;
    if (g.had_old) g.old = *cur;
    Status st;
    switch (op.kind) {
      case OpKind::kAdd:
        if (g.had_old) { st = Status::AlreadyExists("duplicate add of " + op.s.key.to_string()); break; }
        g.now.key = op.s.key;
        g.now.node = op.s.choose ? codes_.choose(h) : op.s.node;
        if (op.s.choose) g.weights_version = weights_version_;
        g.now.teid_dl = op.s.teid_dl;
        g.now.enb_ip = op.s.enb_ip;
        g.now.bearer = op.s.bearer;
        break;
      case OpKind::kModify:
        if (!g.had_old) { st = Status::NotFound("unknown session " + op.s.key.to_string()); break; }
        g.now = g.old;  // the fields the op does not set are kept
        if (op.s.fields & SessionSpec::kTeidDl) g.now.teid_dl = op.s.teid_dl;
        if (op.s.fields & SessionSpec::kEnbIp) g.now.enb_ip = op.s.enb_ip;
        if (op.s.fields & SessionSpec::kBearer) g.now.bearer = op.s.bearer;
        break;
      case OpKind::kMove:
        if (!g.had_old) { st = Status::NotFound("unknown session " + op.s.key.to_string()); break; }
        g.now = g.old;
        g.now.node = op.s.node;
        g.now.teid_ul = 0;
        break;
      case OpKind::kDelete:
        if (!g.had_old) { st = Status::NotFound("unknown session " + op.s.key.to_string()); break; }
        g.now = g.old;
        g.erase = true;
        break;
      case OpKind::kShow:
        break;
    }
    if (st.ok() && !g.erase && !(member_mask_ >> g.now.node & 1u))
      st = Status::InvalidArgument("unknown node " + std::to_string(g.now.node));
    if (st.ok() && !g.erase && !(live_mask_ >> g.now.node & 1u))
      st = Status::Unavailable("handling node " + std::to_string(g.now.node) + " is down");
    if (!st.ok()) {
      ++stats_.ops_failed;
      forget(op.request_id);
      reply_now(op, st, g.had_old ? &g.old : nullptr, p);
      continue;
    }
    if (op.kind == OpKind::kMove && g.old.node == g.now.node) {
      // A move to the node that already handles the session changes
      // nothing, but its request id must survive a restart like any acked
      // op's (or a retry after a later move would move the session back):
      // a PUT of the unchanged record carries it, and the reply waits for
      // the group's commit. No FIB, GPT or convergence work.
      g.noop = true;
      g.now = g.old;
      wal_->append(WalRecord{WalRecord::kPut, g.old.key, g.old.node, g.old.teid_dl, g.old.enb_ip, g.old.bearer,
                             op.request_id});
    } else if (g.erase) {
      g.remove_mask = placement(g.old, h);
      wal_->append(WalRecord{WalRecord::kDel, op.s.key, 0, 0, 0, 0, op.request_id});
    } else {
      g.install_mask = placement(g.now, h);
      wal_->append(WalRecord{WalRecord::kPut, g.now.key, g.now.node, g.now.teid_dl, g.now.enb_ip,
                             g.now.bearer, op.request_id});
    }
    remember(op.request_id, StatusCode::kOk, g.now.node, /*in_flight=*/true);
    g.in = std::move(op);
    keys.put(g.now.key, uint32_t(ops.size()));
    ops.push_back(std::move(g));
  }
  if (ops.empty()) {
    spare_.push_back(std::move(grp));
    return Status::Ok();
  }
  // Learnt teid_ul ride on this commit. After this group's own records:
  // replay ignores a TEID record whose session a later record moved or
  // removed, and a modify keeps it (rib/wal.h).
  flush_teid_log();
  const uint64_t t_wal = mono_us();
  Status st = wal_->commit();
  stats_.us_wal += mono_us() - t_wal;
  if (!st.ok()) {
    // Nothing was acknowledged; the ops fail, or, when the log may hold
    // them (a failed fdatasync or cut-back), the status says "outcome
    // unknown" (Wal::commit): a retry with the same id after a restart is
    // answered from the log.
    std::vector<OpReply> rs;
    for (Op& g : ops) {
      OpReply r;
      r.token = g.in.token;
      r.request_id = g.in.request_id;
      r.status = st;
      r.rec = g.old;
      rs.push_back(std::move(r));
      forget(g.in.request_id);
      if (auto f = inflight_ids_.find(g.in.request_id); f != inflight_ids_.end()) {
        retries_waiting_ -= f->second.size();
        inflight_ids_.erase(f);
      }
    }
    io_->reply(std::move(rs));
    spare_.push_back(std::move(grp));
    return st;
  }
  ++stats_.groups;
  stats_.max_group = std::max<uint64_t>(stats_.max_group, ops.size());
  // One FibBatch per node, in op order.
  std::unordered_map<uint32_t, FibBatch> batches;
  std::unordered_map<uint32_t, PendingAck> pend;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    const Op& g = ops[i];
    for (uint32_t m = g.install_mask; m; m &= m - 1) {
      const uint32_t n = uint32_t(std::countr_zero(m));
      // A modify names the teid_ul it keeps: a handler restoring after a
      // restart places the session there if the batch comes before the
      // snapshot (NodeState RESTORING); an add or a move names none.
      batches[n].install.push_back(fib_entry_for(g.now.key, g.now, n));
      pend[n].items.push_back({i, true});
    }
    for (uint32_t m = g.remove_mask; m; m &= m - 1) {
      const uint32_t n = uint32_t(std::countr_zero(m));
      batches[n].remove.push_back(g.old.key);
      pend[n].items.push_back({i, false});
    }
  }
  grp.id = next_group_++;
  grp.t0_us = now_us;
  for (auto& [n, b] : batches) {
    b.batch_id = next_batch_++;
    b.owner = opt_.self;
    PendingAck pa = std::move(pend[n]);
    pa.node = n;
    // Installs first, then removes: the batch's order on the wire.
    std::stable_partition(pa.items.begin(), pa.items.end(), [](auto& x) { return x.second; });
    grp.acks[b.batch_id] = std::move(pa);
    ++stats_.fib_batches;
  }
  grp.sent_us = mono_us();
  stats_.us_start += grp.sent_us - t_wal;
  flight_.push_back(std::move(grp));
  stats_.max_in_flight = std::max<uint64_t>(stats_.max_in_flight, flight_.size());
  // Send after registering every pending ack (an in-process io may ack inline).
  std::vector<std::pair<uint32_t, FibBatch>> out;
  for (auto& [n, b] : batches) out.emplace_back(n, std::move(b));
  for (auto& [n, b] : out) io_->send_fib(n, std::move(b));
  finish_ready(now_us);
  return Status::Ok();
}

void Owner::finish_ready(uint64_t now_us) {
  while (!flight_.empty() && flight_.front().acks.empty()) finish_group(now_us);
}

void Owner::on_fib_ack(const FibAckMsg& ack, uint64_t now_us) {
  if (const auto rb = repush_.find(ack.batch_id); rb != repush_.end()) {
    // Batch ids are sequential: another node's ack of this batch would use
    // it up, and the real ack would be a stray (its teid_ul never learnt).
    if (rb->second.node != ack.node) {
      ++stats_.stray_acks;
      return;
    }
    const std::vector<FlowKey> keys = std::move(rb->second.keys);
    repush_.erase(rb);
    for (size_t i = 0; i < keys.size() && i < ack.teid_ul.size(); ++i)
      if (ack.teid_ul[i] != 0 && learn_teid(keys[i], ack.node, ack.teid_ul[i]) == TeidLearn::kBad)
        ++stats_.bad_teid_acks;
    if (!parked_.empty()) answer_parked();
    return;
  }
  if (const auto cb = cleanup_batches_.find(ack.batch_id); cb != cleanup_batches_.end()) {
    if (cb->second.node != ack.node) {
      ++stats_.stray_acks;
      return;
    }
    // An undo's install may have given the session a new index (its old
    // one taken while the node restarted): the owner learns it here too.
    const std::vector<FlowKey>& keys = cb->second.installs;
    for (size_t i = 0; i < keys.size() && i < ack.teid_ul.size(); ++i)
      if (ack.teid_ul[i] != 0 && learn_teid(keys[i], ack.node, ack.teid_ul[i]) == TeidLearn::kBad)
        ++stats_.bad_teid_acks;
    auto& items = cleanup_[ack.node];
    for (auto i = items.begin(); i != items.end();)
      i = i->second.batch == ack.batch_id ? items.erase(i) : std::next(i);
    cleanup_batches_.erase(cb);
    return;
  }
  Group* grp = nullptr;
  auto it = std::unordered_map<uint64_t, PendingAck>::iterator();
  for (Group& g : flight_) {
    it = g.acks.find(ack.batch_id);
    if (it != g.acks.end()) {
      grp = &g;
      break;
    }
  }
  if (grp == nullptr || it->second.node != ack.node) {
    ++stats_.stray_acks;
    return;
  }
  std::vector<Op>& ops = grp->ops;
  const PendingAck& pa = it->second;
  size_t ii = 0, ri = 0;
  for (const auto& [opi, is_install] : pa.items) {
    Op& g = ops[opi];
    if (is_install) {
      const StatusCode c = ii < ack.install_code.size() ? ack.install_code[ii] : StatusCode::kInternal;
      const uint32_t teid = ii < ack.teid_ul.size() ? ack.teid_ul[ii] : 0;
      ++ii;
      if (c != StatusCode::kOk) {
        if (g.st.ok())
          g.st = Status(c, "FIB install at node " + std::to_string(ack.node) + " failed" +
                               (c == StatusCode::kCapacity ? ": its FIB is full (node.fib_capacity)" : ""));
      } else if (ack.node == g.now.node) {
        if (teid_names(teid, ack.node)) {
          g.now.teid_ul = teid;
        } else {
          // Stored, it would be the client's uplink TEID and steer the
          // session's uplink packets to another node: the install counts
          // as failed (the op is undone, its entry removed again).
          ++stats_.bad_teid_acks;
          if (g.st.ok())
            g.st = Status::Internal("FIB ack from node " + std::to_string(ack.node) + ": teid_ul " +
                                    std::to_string(teid) + " does not name that node");
        }
      }
    } else {
      const StatusCode c = ri < ack.remove_code.size() ? ack.remove_code[ri] : StatusCode::kInternal;
      ++ri;
      if (c != StatusCode::kOk && c != StatusCode::kNotFound && g.st.ok())
        g.st = Status(c, "FIB remove at node " + std::to_string(ack.node) + " failed");
    }
  }
  grp->acks.erase(it);
  finish_ready(now_us);
}

Owner::TeidLearn Owner::learn_teid(const FlowKey& k, uint32_t node, uint32_t teid_ul) {
  if (!teid_names(teid_ul, node)) return TeidLearn::kBad;
  SessionRec* r = recs_[partition_of_key(k)].find(k);
  // An op in flight decides first (an add in flight has no record yet; if
  // it fails, the report is still wanted for what the record then is).
  if (in_flight(k) != nullptr) return TeidLearn::kInFlight;
  if (r == nullptr || r->node != node) return TeidLearn::kSkipped;
  if (r->teid_ul == teid_ul) return TeidLearn::kSame;
  note_teid(k, node, teid_ul);
  r->teid_ul = teid_ul;
  return TeidLearn::kLearnt;
}

std::vector<uint32_t> Owner::on_teid_report(const TeidReportMsg& r) {
  std::vector<uint32_t> retry;
  for (size_t i = 0; i < r.keys.size() && i < r.teid_ul.size(); ++i) {
    if (!owns(partition_of_key(r.keys[i]))) {
      ++stats_.teid_reports_refused;
      continue;
    }
    switch (learn_teid(r.keys[i], r.node, r.teid_ul[i])) {
      case TeidLearn::kLearnt: ++stats_.teid_reports_learnt; break;
      case TeidLearn::kBad: ++stats_.teid_reports_refused; break;
      case TeidLearn::kSkipped: ++stats_.teid_reports_skipped; break;
      case TeidLearn::kInFlight: retry.push_back(uint32_t(i)); break;
      case TeidLearn::kSame: break;
    }
  }
  return retry;
}

void Owner::fail_timeouts(uint64_t now_us) {
  if (flight_.empty()) return;
  Group& grp = flight_.front();
  std::vector<Op>& ops = grp.ops;
  for (auto& [id, pa] : grp.acks) {
    ++stats_.fib_timeouts;
    for (const auto& [opi, is_install] : pa.items) {
      Op& g = ops[opi];
      if (g.st.ok()) g.st = Status::Unavailable("node " + std::to_string(pa.node) + " did not ack the FIB entry");
    }
  }
  grp.acks.clear();
  finish_ready(now_us);
}

void Owner::finish_group(uint64_t now_us) {
  Group& grp = flight_.front();
  std::vector<Op>& ops = grp.ops;
  const uint64_t t_fin = mono_us();
  stats_.us_fib_wait += t_fin - grp.sent_us;
  std::vector<StreamDelta> deltas;
  std::vector<OpReply> replies;
  replies.reserve(ops.size());
  gpt::DeltaList dl;
  std::unordered_map<uint32_t, FibBatch> cleanup;  // strays of failed ops
  std::vector<size_t> compensated;  // indices in `replies` of ops whose log record is undone
  // GPT updates 8, 4 and 2 ops ahead are hinted (GptBuilder::prefetch_update
  // stages 0, 1, 2) so the misses of consecutive updates overlap.
  auto hint = [&](size_t j, unsigned stage) {
    if (j < ops.size() && gpt_ && ops[j].st.ok()) gpt_->prefetch_update(ops[j].now.key, stage);
  };
  for (size_t j = 0; j < ops.size(); ++j) {
    hint(j + 8, 0);
    hint(j + 4, 1);
    hint(j + 2, 2);
    Op& g = ops[j];
    const uint32_t p = g.part;
    if (g.st.ok() && gpt_ && !g.noop) {
      dl.clear();
      Status gs;
      switch (g.in.kind) {
        case OpKind::kAdd: gs = gpt_->insert(g.now.key, uint8_t(g.now.node), &dl); break;
        case OpKind::kMove: gs = gpt_->change(g.now.key, uint8_t(g.now.node), &dl); break;
        case OpKind::kDelete: gs = gpt_->erase(g.now.key, &dl); break;
        default: break;
      }
      if (!gs.ok()) g.st = gs.with_context("GPT");
      for (size_t i = 0; i < dl.size(); ++i) {
        std::span<uint8_t> d = dl.mutable_delta(i);
        gpt::DeltaHeader hdr;
        std::span<const uint8_t> payload;
        if (!gpt::parse_delta(d, &hdr, &payload).ok()) continue;  // cannot happen: builder output
        const uint64_t seq = ++seq_[hdr.partition];
        gpt::delta_stamp(d, epoch_, seq);
        StreamDelta sd;
        sd.partition = hdr.partition;
        sd.sub_id = hdr.sub_id;
        sd.epoch = epoch_;
        sd.seq = seq;
        sd.bytes.assign(d.begin(), d.end());
        stats_.delta_bytes += sd.bytes.size();
        deltas.push_back(std::move(sd));
      }
    }
    OpReply r;
    r.token = g.in.token;
    r.request_id = g.in.request_id;
    r.partition = p;
    if (g.st.ok() && g.noop) {  // a move to the current node: logged, nothing else
      ++stats_.ops_ok;
      r.status = Status::Ok();
      r.rec = g.old;
      r.epoch = epoch_;
      r.seq = seq_[p];
      remember(g.in.request_id, StatusCode::kOk, g.now.node);
    } else if (g.st.ok()) {
      auto& m = recs_[p];
      if (g.erase) {
        if (m.erase(g.now.key)) --nsessions_;
      } else if (m.put(g.now.key, g.now)) {
        ++nsessions_;
      }
      if (!g.erase && g.now.teid_ul != 0 && !(g.had_old && g.old.node == g.now.node && g.old.teid_ul == g.now.teid_ul))
        note_teid(g.now.key, g.now.node, g.now.teid_ul);
      ++stats_.ops_ok;
      r.status = Status::Ok();
      r.rec = g.now;
      r.epoch = epoch_;
      r.seq = seq_[p];
      r.weights_version = g.weights_version;
      remember(g.in.request_id, StatusCode::kOk, g.now.node);
      // Members that came up after the group started (full duplication,
      // hash partition) got no install: a snapshot they fetched meanwhile
      // left out the key in flight. They get the entry now (tracked as a
      // cleanup, so it is sent until acked).
      const uint32_t want = g.erase ? 0 : placement(g.now, g.h);
      for (uint32_t mm = want & ~g.install_mask; mm; mm &= mm - 1)
        cleanup[uint32_t(std::countr_zero(mm))].install.push_back(
            fib_entry_for(g.now.key, g.now, uint32_t(std::countr_zero(mm))));
      // Convergence watch (and the make-before-break removal of a move:
      // not at a node the new record is placed on too).
      uint32_t rm = 0;
      if (g.in.kind == OpKind::kMove) rm = placement(g.old, g.h) & ~g.install_mask & ~want;
      if (gpt_) {
        waiters_[p].push_back(Waiter{StreamPos{epoch_, seq_[p]}, g.in.t0_us, g.now.key, rm, g.old});
      } else {
        // No GPT: every node that steers by this session (its placement)
        // acked the installs, so the change has converged now.
        lat_converge_.add(now_us - g.in.t0_us);
        if (rm) {
          for (uint32_t mm = rm; mm; mm &= mm - 1)
            cleanup[uint32_t(std::countr_zero(mm))].remove.push_back(g.now.key);
          ++stats_.removes_after_converge;
        }
      }
    } else {
      ++stats_.ops_failed;
      r.status = g.st;
      r.rec = g.had_old ? g.old : g.now;
      forget(g.in.request_id);
      // Compensate the log (an UNDO record: recovery forgets the id too) and
      // undo stray FIB changes.
      ++stats_.compensations;
      compensated.push_back(replies.size());
      if (g.had_old) {
        wal_->append(WalRecord{WalRecord::kPut, g.old.key, g.old.node, g.old.teid_dl, g.old.enb_ip, g.old.bearer,
                               g.in.request_id, /*undo=*/true});
        // A failed move's or delete's undo PUT follows a record that changed
        // the node or erased the session: replay would restore it without
        // its teid_ul unless a TEID record follows. The teid_ul is the live
        // record's (recs_ is untouched by a failed op, but a re-push ack may
        // have changed it since g.old was taken; that ack's own TEID record
        // may sit before the undo, where replay ignores it).
        const SessionRec* cur = recs_[p].find(g.old.key);
        if (cur != nullptr && cur->teid_ul != 0 && cur->node == g.old.node &&
            (g.erase || g.old.node != g.now.node))
          note_teid(cur->key, cur->node, cur->teid_ul);
      }
      else
        wal_->append(WalRecord{WalRecord::kDel, g.now.key, 0, 0, 0, 0, g.in.request_id, /*undo=*/true});
      if (g.erase) {
        // The entry may already be gone where the remove was acked: restore
        // it, also at members that came up since the group started (a
        // snapshot they fetched meanwhile left out the key in flight).
        for (uint32_t mm = g.remove_mask | placement(g.old, g.h); mm; mm &= mm - 1)
          cleanup[uint32_t(std::countr_zero(mm))].install.push_back(
              fib_entry_for(g.old.key, g.old, uint32_t(std::countr_zero(mm))));
      } else {
        const uint32_t keep = g.had_old ? placement(g.old, g.h) : 0;
        for (uint32_t mm = g.install_mask & ~keep; mm; mm &= mm - 1)
          cleanup[uint32_t(std::countr_zero(mm))].remove.push_back(g.now.key);
        // Restore the old entry where the failed op overwrote it, and where
        // a member that came up since has none (as above; a failed move's
        // old handler kept it: installs are idempotent). A move's snapshot
        // already carried the old entry, a modify's did not.
        const uint32_t late = g.in.kind == OpKind::kMove ? 0u : keep & ~g.install_mask;
        if (g.had_old)
          for (uint32_t mm = (g.install_mask & keep) | late; mm; mm &= mm - 1)
            cleanup[uint32_t(std::countr_zero(mm))].install.push_back(
                fib_entry_for(g.old.key, g.old, uint32_t(std::countr_zero(mm))));
      }
    }
    const uint64_t lat = now_us - g.in.t0_us;
    lat_update_.add(lat);
    replies.push_back(std::move(r));
  }
  // Replay is assignment, so the compensation records only have to reach
  // the log; a failure to write them is a failed log: fatal (pump()). The
  // op's own record is in the log then and takes effect at the restart, so
  // its failure is not the answer: the outcome is unknown (kIo; the
  // client's retry after the restart gets the log's answer).
  if (!compensated.empty())
    if (Status c = wal_->commit(); !c.ok()) {
      if (fatal_.ok()) fatal_ = c;
      for (const size_t i : compensated)
        replies[i].status = Status::Io("outcome unknown: the op failed (" + replies[i].status.message() +
                                       ") but the log could not record its undo (" + c.message() +
                                       "); its record stays in the log and takes effect when the owner restarts");
    }
  stats_.deltas += deltas.size();
  if (!deltas.empty()) io_->publish(std::move(deltas));
  for (auto& [n, b] : cleanup) send_cleanup(n, std::move(b), now_us);
  // Retries that arrived while in flight get the same answer.
  std::vector<OpReply> extra;
  for (const OpReply& r : replies) {
    if (inflight_ids_.empty()) break;
    auto f = inflight_ids_.find(r.request_id);
    if (f == inflight_ids_.end()) continue;
    for (ClientOp& w : f->second) {
      OpReply c = r;
      c.token = w.token;
      extra.push_back(std::move(c));
    }
    retries_waiting_ -= f->second.size();
    inflight_ids_.erase(f);
  }
  for (OpReply& r : extra) replies.push_back(std::move(r));
  io_->reply(std::move(replies));
  spare_.push_back(std::move(flight_.front()));
  flight_.pop_front();
  // Partitions with new waiters might already be converged (single node).
  std::vector<uint32_t> parts;
  for (const auto& [p, d] : waiters_) parts.push_back(p);
  for (uint32_t p : parts) check_converged(p, now_us);
  stats_.us_finish += mono_us() - t_fin;
  // Every committed record must be in recs_: only with nothing in flight.
  // Never after a log failure: the log may end in a torn or unsynced tail
  // that a rotation would leave in a segment that is not the last.
  if (fatal_.ok() && flight_.empty() && snapshot_due()) {
    Status sn = wal_->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
      for (const auto& m : recs_)
        m.for_each([&](const FlowKey& k, const SessionRec& r) {
          emit(WalRecord{WalRecord::kPut, k, r.node, r.teid_dl, r.enb_ip, r.bearer, 0});
          if (opt_.log_teid_ul && r.teid_ul != 0 && teid_names(r.teid_ul, r.node)) {
            WalRecord t;
            t.type = WalRecord::kTeid;
            t.key = k;
            t.node = r.node;
            t.teid_ul = r.teid_ul;
            emit(t);
          }
        });
      // The request-id dedup window, oldest first: the segments that held
      // these ids' records are deleted once the snapshot is durable.
      // Stale entries of the order (forgotten ids) are skipped: each live id once.
      for (const auto& [id, gen] : done_order_)
        if (const Done* d = done_.find(id);
            d != nullptr && d->gen == gen && d->code == StatusCode::kOk && !d->in_flight)
          emit(WalRecord{WalRecord::kDone, FlowKey{}, d->node, 0, 0, 0, id});
    });
    // The log stays whole (the new segment is opened first, the old files
    // are removed only after the snapshot is durable), but a log that cannot
    // rotate will not take commits for long: fatal (pump()).
    if (!sn.ok() && fatal_.ok()) fatal_ = sn;
    if (sn.ok()) teid_log_.clear();  // the snapshot holds every record's teid_ul
  }
}

}  // namespace sb::rib
