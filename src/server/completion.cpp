#include "server/completion.h"

#include "core/error.h"

namespace lamina::server {

Completion::Completion(Engine& engine, const ApiRequest& r, const Tokenizer& tok)
    : engine_(engine), tok_(tok), logprobs_(r.engine.logprobs >= 0) {
  choices_.reserve(size_t(r.n));
  for (int i = 0; i < r.n; ++i) {
    Request req = r.engine;
    req.sampling.seed += uint64_t(i);  // distinct draws, each reproducible on its own (seed + i with n = 1)
    choices_.push_back(Choice{0, TextStream(tok, r.stop), 0, false, {}, {}, 0});
    try {
      choices_.back().id = engine_.submit(std::move(req), [inbox = inbox_, i](const TokenEvent& e) {
        std::lock_guard lk(inbox->mu);
        inbox->events.push_back({i, e});
        inbox->cv.notify_one();
      });
    } catch (...) {
      choices_.pop_back();
      cancel();
      while (!done()) next();
      throw;
    }
  }
}

Completion::~Completion() {
  if (done()) return;
  cancel();
  while (!done()) next();  // the engine's last events: no sequence is left running for nobody
}

void Completion::cancel() {
  for (const Choice& c : choices_)
    if (!c.ended) engine_.cancel(c.id);
}

int Completion::tokens() const {
  int n = 0;
  for (const Choice& c : choices_) n += c.tokens;
  return n;
}

Completion::Event Completion::next() {
  Raw raw;
  {
    std::unique_lock lk(inbox_->mu);
    inbox_->cv.wait(lk, [&] { return !inbox_->events.empty(); });
    raw = std::move(inbox_->events.front());
    inbox_->events.pop_front();
  }
  Choice& c = choices_[size_t(raw.choice)];
  Event ev;
  ev.choice = raw.choice;
  if (raw.e.token >= 0) {
    const auto now = Clock::now();
    ev.token = true;
    if (c.tokens++ > 0) ev.since_last_ms = std::chrono::duration<double, std::milli>(now - c.last).count();
    c.last = now;
    if (raw.e.logprobs) c.pending.push_back(token_prob(tok_, raw.e.token, *raw.e.logprobs));
    const bool was = c.text.stopped();
    ev.text = c.text.push(raw.e.token);
    if (!was && c.text.stopped()) engine_.cancel(c.id);  // a stop string: this choice is done
  }
  if (raw.e.finish != Finish::None) {
    c.ended = true, ++ended_;
    ev.ended = true;
    ev.finish = c.text.stopped() && raw.e.finish != Finish::Error ? Finish::Stop : raw.e.finish;
    ev.error = raw.e.error;
    if (ev.finish != Finish::Error) ev.text += c.text.finish();
  }
  if ((!ev.text.empty() || ev.ended) && !c.pending.empty()) {
    ev.probs_offset = c.offset;
    for (const TokenProb& p : c.pending) c.offset += p.token.size();
    ev.probs = std::move(c.pending);
    c.pending.clear();
  }
  return ev;
}

}  // namespace lamina::server
