// grpc_stream.hpp — the server side of ModelStreamInfer (Triton's streaming extension of the
// KServe v2 gRPC API), shared by loom-serve and the controller's router: requests are read as
// they come and each is started at once, and the answers are written one at a time, in the order
// of the requests. At most `max_in_flight` requests are held at once, counting those running,
// those answered and waiting for their turn, and the one being written: beyond, reading pauses
// until an answer has been written, so a client that sends and never reads holds a bounded
// amount of the server's memory (flow control), however many requests it sends. The stream
// ends with OK once the client has closed its side and every answer is written. Subclasses
// start each request in dispatch() and call answer() once for it, from any thread. No gRPC
// operation is started with the lock held (a reaction may run on the calling thread).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace loom::serve {

template <class Req, class Resp>
class OrderedStream : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit OrderedStream(size_t max_in_flight) : max_in_flight_(max_in_flight) {}

 protected:
  // Starts request `seq`; answer(seq, ...) must follow exactly once.
  virtual void dispatch(std::unique_ptr<Req> req, uint64_t seq) = 0;
  // The client went away or the deadline passed: cancel what is in flight (answers still come).
  virtual void cancelled() {}

  // The first read; or, when the stream must be refused before any (a bad token), refuse().
  void begin() { read_next(); }
  void refuse(const grpc::Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    this->Finish(s);
  }

  void answer(uint64_t seq, std::unique_ptr<Resp> r) {
    std::unique_lock<std::mutex> lock(mu_);
    --in_flight_;
    if (!finished_) done_[seq] = std::move(r);
    const bool resume = resume_if_room();  // only when the client is gone is the answer dropped
    if (delete_if_over(lock)) return;
    if (resume) {  // no read is outstanding while paused, so req_ is this thread's
      lock.unlock();
      read_next();
      lock.lock();
    }
    next_step(lock);
  }

 private:
  void read_next() {
    req_ = std::make_unique<Req>();
    this->StartRead(req_.get());
  }

  void OnReadDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok || finished_) {
      reading_done_ = true;
      return next_step(lock);
    }
    const uint64_t seq = next_read_++;
    ++in_flight_;
    const bool more = held() < max_in_flight_;
    paused_ = !more;
    lock.unlock();
    dispatch(std::move(req_), seq);
    if (more) read_next();
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    writing_msg_.reset();
    ++next_write_;
    if (!ok && !finished_) {  // the client is gone: no more writes
      finished_ = true;
      done_.clear();
      lock.unlock();
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    if (resume_if_room()) {  // an answer has left: room for one more request
      lock.unlock();
      read_next();
      lock.lock();
    }
    next_step(lock);
  }

  // With mu_ held: the requests held now (running, answered and waiting, being written).
  size_t held() const { return in_flight_ + done_.size() + (writing_ ? 1 : 0); }
  // With mu_ held: true (and no longer paused) when reading was paused and there is room again.
  bool resume_if_room() {
    if (!paused_ || finished_ || held() >= max_in_flight_) return false;
    paused_ = false;
    return true;
  }

  void OnCancel() override { cancelled(); }

  void OnDone() override {
    std::unique_lock<std::mutex> lock(mu_);
    over_ = true;
    delete_if_over(lock);
  }

  // With mu_ held (released on return): the next answer in order is written, or the stream
  // ends once the client has closed its side and nothing is left to answer or write.
  void next_step(std::unique_lock<std::mutex>& lock) {
    if (finished_ || writing_) return;
    auto it = done_.find(next_write_);
    if (it != done_.end()) {
      writing_ = true;
      writing_msg_ = std::move(it->second);
      done_.erase(it);
      Resp* msg = writing_msg_.get();
      lock.unlock();
      this->StartWrite(msg);
      return;
    }
    if (reading_done_ && in_flight_ == 0 && done_.empty()) {
      finished_ = true;
      lock.unlock();
      this->Finish(grpc::Status::OK);
    }
  }

  // gRPC is done with the stream (OnDone) and no answer is still to come: the reactor goes.
  bool delete_if_over(std::unique_lock<std::mutex>& lock) {
    if (!over_ || in_flight_ > 0) return false;
    lock.unlock();
    delete this;
    return true;
  }

  const size_t max_in_flight_;
  std::mutex mu_;
  std::unique_ptr<Req> req_;                      // the read in progress
  std::unique_ptr<Resp> writing_msg_;             // the write in progress
  std::map<uint64_t, std::unique_ptr<Resp>> done_;  // answered, waiting for their turn
  uint64_t next_read_ = 0, next_write_ = 0;
  size_t in_flight_ = 0;
  bool paused_ = false, reading_done_ = false, writing_ = false, finished_ = false, over_ = false;
};

}  // namespace loom::serve
