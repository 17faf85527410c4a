// One completion request in the engine: its n choices as n sequences of the same prompt (seeds
// seed, seed + 1, ...; the engine's prefix cache computes the shared prompt once), each choice's
// tokens turned into text as they come (TextStream: whole UTF-8, stop strings held back), a stop
// string ending its own choice only. The engine's thread pushes events; the HTTP thread takes them
// with next(); asked for log probabilities, each text comes with those of the tokens it holds
// (a token whose text is held back goes with the next). Destroyed early (the client went away, an error), it cancels what still runs and
// waits for the engine's last events, so no callback outlives it.
#pragma once

#include "server/api.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lamina::server {

class Completion {
 public:
  using Clock = std::chrono::steady_clock;

  // What next() returns: a choice's event. `token`: a token arrived (the choice's first when
  // since_last_ms < 0); `text`: the text it made final; `ended`: the choice's last event, with
  // its finish reason (Stop when a stop string ended it) and, for Finish::Error, the error.
  struct Event {
    int choice = 0;
    bool token = false;
    double since_last_ms = -1;
    std::string text;
    bool ended = false;
    Finish finish = Finish::None;
    std::string error;
    std::vector<TokenProb> probs;  // with text or at the end, when asked: the tokens' since the last
    size_t probs_offset = 0;       // the first of them's byte offset in the choice's token text
  };

  // Submits the request's n sequences. Throws lamina::Error when the engine refuses one (the
  // ones already submitted are cancelled first).
  Completion(Engine& engine, const ApiRequest& r, const Tokenizer& tok);
  ~Completion();
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  Event next();  // waits for the next event of any choice
  bool done() const { return ended_ == int(choices_.size()); }
  void cancel();  // every choice still running
  int choices() const { return int(choices_.size()); }
  int tokens(int choice) const { return choices_[size_t(choice)].tokens; }
  int tokens() const;  // of every choice
  bool logprobs() const { return logprobs_; }

 private:
  struct Raw {  // an engine event and the choice it belongs to
    int choice;
    TokenEvent e;
  };
  struct Inbox {  // handed from the engine's thread to the HTTP thread
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Raw> events;
  };
  struct Choice {
    int64_t id = 0;
    TextStream text;
    int tokens = 0;
    bool ended = false;
    Clock::time_point last;
    std::vector<TokenProb> pending;  // log probabilities of tokens whose text is not out yet
    size_t offset = 0;               // bytes of the token texts handed out
  };

  Engine& engine_;
  const Tokenizer& tok_;
  bool logprobs_ = false;
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  std::vector<Choice> choices_;
  int ended_ = 0;
};

}  // namespace lamina::server
