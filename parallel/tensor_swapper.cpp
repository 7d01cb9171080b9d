#include "tessera/parallel/tensor_swapper.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::parallel {

TensorSwapper::TensorSwapper(NvmeOffloadOptions options, const std::string& name)
    : options_(std::move(options)), io_(options_.aio) {
  TS_CHECK(options_.buffer_count >= 1, options_.buffer_count_key, " must be >= 1, got ",
           options_.buffer_count);
  TS_CHECK(options_.buffer_numel >= 1, "NVMe swap: buffer_numel must be >= 1, got ",
           options_.buffer_numel);
  budget_ = options_.buffer_count *
            io::AsyncFileIO::aligned(options_.buffer_numel * options_.element_bytes);
  TS_CHECK(options_.sub_group_size >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
           options_.sub_group_size);
  io::check_writable_directory(options_.nvme_path, options_.path_key);
  const std::filesystem::path file =
      std::filesystem::path(options_.nvme_path) /
      ("tessera-" + name + "-" + std::to_string(::getpid()) + ".swap");
  file_ = io_.open_scratch(file);
}

TensorSwapper::~TensorSwapper() {
  // Nothing may still read or write a buffer once it is freed (errors are moot here).
  for (Transfer& t : writes_) try {
      io_.wait(t.ticket);
    } catch (const std::exception&) {
    }
  for (auto& [s, t] : reads_) try {
      if (!t.from_write) io_.wait(t.ticket);
    } catch (const std::exception&) {
    }
}

const std::string& TensorSwapper::path() const {
  return io_.path(file_);
}

const TensorSwapper::Region& TensorSwapper::region_for(const std::string& key, int64_t bytes) {
  auto it = regions_.find(key);
  if (it == regions_.end()) {
    it = regions_.emplace(key, Region{end_, io::AsyncFileIO::aligned(bytes)}).first;
    end_ += io::AsyncFileIO::aligned(bytes);
    stats_.disk_bytes = end_;
  }
  TS_CHECK(io::AsyncFileIO::aligned(bytes) <= it->second.bytes, "NVMe swap: '", key, "' grew to ",
           bytes, " bytes, its region in '", path(), "' holds ", it->second.bytes);
  return it->second;
}

io::AlignedBuffer TensorSwapper::take_buffer(int64_t bytes) {
  // The staging budget bounds the buffers in flight: the oldest write makes room (a tensor
  // larger than the budget goes alone).
  const int64_t need = io::AsyncFileIO::aligned(bytes);
  while (bytes_out_ + need > budget_ && !writes_.empty()) complete_oldest_write();
  for (size_t i = 0; i < free_buffers_.size(); ++i)
    if (free_buffers_[i].size() >= need) {
      io::AlignedBuffer b = std::move(free_buffers_[i]);
      free_buffers_.erase(free_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
      bytes_kept_ -= b.size();
      bytes_out_ += b.size();
      return b;
    }
  // Kept buffers too small for this one go, as far as the budget needs.
  while (!free_buffers_.empty() && bytes_out_ + bytes_kept_ + need > budget_) {
    bytes_kept_ -= free_buffers_.back().size();
    note_resident(-free_buffers_.back().size());
    free_buffers_.pop_back();
  }
  note_resident(need);
  bytes_out_ += need;
  return io::AlignedBuffer(need);
}

void TensorSwapper::give_buffer(io::AlignedBuffer buffer) {
  bytes_out_ -= buffer.size();
  if (bytes_out_ + bytes_kept_ + buffer.size() <= budget_) {
    bytes_kept_ += buffer.size();
    free_buffers_.push_back(std::move(buffer));
    return;
  }
  note_resident(-buffer.size());
}

void TensorSwapper::note_resident(int64_t delta) {
  resident_ += delta;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
}

void TensorSwapper::let_go(Transfer& t) {
  if (t.let_go) return;
  t.let_go = true;
  {
    HostCacheBypass to_system;  // (the point is that the process holds these bytes no more)
    t.storage->release();
  }
  t.storage->set_fetcher(shared_from_this());
  key_of_[t.storage.get()] = t.key;
  if (counted_.erase(t.storage.get())) note_resident(-static_cast<int64_t>(t.storage->nbytes()));
}

void TensorSwapper::complete_oldest_write() {
  Transfer t = std::move(writes_.front());
  writes_.pop_front();
  try {
    io_.wait(t.ticket);
  } catch (...) {
    // Nothing is lost: a tensor whose memory went already gets its bytes back from the buffer.
    if (t.let_go) {
      t.storage->make_resident();
      std::memcpy(t.storage->data(), t.buffer.data(), t.storage->nbytes());
    }
    throw;
  }
  stats_.bytes_written += t.bytes;
  let_go(t);
  if (t.keep_for_read) {  // (its bytes are the read ahead of the same tensor: no disk read)
    const auto r = reads_.find(t.storage.get());
    if (r != reads_.end() && r->second.from_write) {
      r->second.buffer = std::move(t.buffer);
      return;
    }
  }
  give_buffer(std::move(t.buffer));
}

bool TensorSwapper::writing(const std::string& key) const {
  return std::any_of(writes_.begin(), writes_.end(),
                     [&](const Transfer& t) { return t.key == key; });
}

void TensorSwapper::settle_writes_of(const std::string& key) {
  while (writing(key)) complete_oldest_write();
}

void TensorSwapper::forget_read(Transfer& read) {
  if (!read.from_write) {
    io_.wait(read.ticket);
  } else if (read.buffer.size() == 0) {  // (its write still has the buffer: it keeps it no more)
    for (Transfer& w : writes_)
      if (w.storage == read.storage) w.keep_for_read = false;
    return;
  }
  give_buffer(std::move(read.buffer));
}

void TensorSwapper::drop_read_of(const Storage* storage) {
  const auto pending = reads_.find(storage);
  if (pending == reads_.end()) return;
  forget_read(pending->second);
  reads_.erase(pending);
}

bool TensorSwapper::take_read(Storage& storage) {
  auto pending = reads_.find(&storage);
  if (pending == reads_.end()) return false;
  // (One from a write gets its buffer when the write is done; the entry stays in place.)
  if (pending->second.from_write) settle_writes_of(pending->second.key);
  Transfer t = std::move(pending->second);
  reads_.erase(pending);
  if (!t.from_write) {
    io_.wait(t.ticket);
    stats_.bytes_read += t.bytes;
  } else {
    stats_.bytes_from_buffers += t.bytes;
  }
  storage.make_resident();
  std::memcpy(storage.data(), t.buffer.data(), storage.nbytes());
  give_buffer(std::move(t.buffer));
  return true;
}

void TensorSwapper::release(const std::vector<optim::StateTensor>& state) {
  for (const optim::StateTensor& s : state) {
    const std::shared_ptr<Storage>& storage = s.tensor.storage();
    drop_read_of(storage.get());         // (read ahead before the tensor changed: stale)
    if (!storage->resident()) continue;  // (already out: unchanged since)
    settle_writes_of(s.key);             // (one write of a region in flight at a time)
    const int64_t bytes = static_cast<int64_t>(storage->nbytes());
    if (counted_.insert(storage.get()).second) note_resident(bytes);  // (made, not read in)
    const Region& r = region_for(s.key, bytes);
    Transfer t{storage, s.key, take_buffer(bytes), r.bytes, 0};
    std::memcpy(t.buffer.data(), storage->data(), static_cast<size_t>(bytes));
    t.ticket = io_.submit(io::AsyncFileIO::Op::write, file_, r.offset, t.buffer.data(), r.bytes);
    writes_.push_back(std::move(t));
    if (!options_.pipeline_write) complete_oldest_write();
  }
}

bool TensorSwapper::prefetch(const std::vector<optim::StateTensor>& state) {
  for (const optim::StateTensor& s : state)
    if (!prefetch_one(s)) return false;  // no room: read the rest when needed
  return true;
}

bool TensorSwapper::prefetch_one(const optim::StateTensor& s) {
  if (!options_.pipeline_read) return false;
  while (!writes_.empty() && io_.done(writes_.front().ticket)) complete_oldest_write();
  Storage* storage = s.tensor.storage().get();
  if (storage->resident() || reads_.count(storage) || !regions_.count(s.key)) return true;
  for (Transfer& w : writes_)
    if (w.key == s.key && w.storage.get() == storage) {
      // Its bytes are on their way out in this write's buffer, which becomes the read ahead
      // once the write is done (the next step's first sub-groups were this step's last).
      w.keep_for_read = true;
      Transfer t{w.storage, w.key, io::AlignedBuffer(), w.bytes, 0};
      t.from_write = true;
      reads_.emplace(storage, std::move(t));
      return true;
    }
  if (writing(s.key)) return true;  // (another tensor's bytes on their way there: read on use)
  const Region& r = regions_.at(s.key);
  if (bytes_out_ + r.bytes > budget_) return false;
  Transfer t{s.tensor.storage(), s.key, take_buffer(r.bytes), r.bytes, 0};
  t.ticket = io_.submit(io::AsyncFileIO::Op::read, file_, r.offset, t.buffer.data(), r.bytes);
  reads_.emplace(storage, std::move(t));
  return true;
}

void TensorSwapper::read_now(Storage& storage, const std::string& key) {
  settle_writes_of(key);  // (the file has the bytes once its write is done)
  const auto r = regions_.find(key);
  TS_CHECK(r != regions_.end(), "NVMe swap: '", key, "' was never written to '", path(), "'");
  io::AlignedBuffer buffer = take_buffer(r->second.bytes);
  io_.wait(io_.submit(io::AsyncFileIO::Op::read, file_, r->second.offset, buffer.data(),
                      r->second.bytes));
  stats_.bytes_read += r->second.bytes;
  storage.make_resident();
  std::memcpy(storage.data(), buffer.data(), storage.nbytes());
  give_buffer(std::move(buffer));
}

void TensorSwapper::acquire(const std::vector<optim::StateTensor>& state) {
  for (const optim::StateTensor& s : state) {
    Storage& storage = *s.tensor.storage();
    if (!take_read(storage) && !storage.resident()) read_now(storage, s.key);
    if (counted_.insert(&storage).second) note_resident(static_cast<int64_t>(storage.nbytes()));
  }
}

void TensorSwapper::finish() {
  if (options_.pipeline_write) {
    // Writes complete during what follows (the next forward and backward): the tensors'
    // memory goes now, their bytes stay in the staging buffers until the writes are done.
    while (!writes_.empty() && io_.done(writes_.front().ticket)) complete_oldest_write();
    for (Transfer& t : writes_) let_go(t);
  } else {
    while (!writes_.empty()) complete_oldest_write();
  }
  for (auto& [storage, t] : reads_) forget_read(t);  // (for a sub-group that did not update)
  reads_.clear();
}

void TensorSwapper::fetch(Storage& storage) {
  if (take_read(storage)) return;  // (read ahead for the next step)
  const auto it = key_of_.find(&storage);
  TS_CHECK(it != key_of_.end(), "NVMe swap: a released storage of ", storage.nbytes(),
           " bytes is not a tensor swapped to '", path(), "'");
  read_now(storage, it->second);
}

void TensorSwapper::discard(const std::vector<optim::StateTensor>& state) {
  for (const optim::StateTensor& s : state) {
    Storage& storage = *s.tensor.storage();
    if (!storage.resident()) continue;
    TS_CHECK(regions_.count(s.key), "NVMe swap: '", s.key, "' was never written to '", path(),
             "', so its memory cannot be dropped");
    {
      HostCacheBypass to_system;
      storage.release();
    }
    storage.set_fetcher(shared_from_this());
    key_of_[&storage] = s.key;
    if (counted_.erase(&storage)) note_resident(-static_cast<int64_t>(storage.nbytes()));
  }
}

void TensorSwapper::swap_out(const std::map<std::string, Tensor>& state) {
  std::vector<optim::StateTensor> resident;
  for (const auto& [key, t] : state)
    if (key != "step" && t.defined() && t.storage()->resident()) resident.push_back({key, t});
  release(resident);
  finish();
}

}  // namespace tessera::parallel
