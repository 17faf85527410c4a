// Sampler and chat-template rendering.
#include "model/chat.h"
#include "model/sampler.h"

#include <gtest/gtest.h>
#include <random>
#include <algorithm>

#include <map>

using namespace lamina;

TEST(Sampler, GreedyIsArgmax) {
  SamplerParams p;
  p.temperature = 0;
  Sampler s(p);
  const std::vector<float> l = {0.1f, 2.f, -1.f, 1.9f};
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.seed = 7;
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) ta.push_back(a.sample(l, {})), tb.push_back(b.sample(l, {}));
  EXPECT_EQ(ta, tb);
  p.seed = 8;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(l, {}));
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKAndMinPRestrictTheDraw) {
  std::vector<float> l = {5.f, 4.9f, 4.8f, 0.f, -1.f};
  SamplerParams p;
  p.temperature = 5.f;  // flat: without the cuts every token would appear
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.top_k = 2;
  p.seed = 1;
  Sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 500; ++i) seen[s.sample(l, {})]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(0) && seen.count(1));
  p.top_k = 0;
  p.min_p = 0.5f;  // p(3) / p(0) = e^-5 < 0.5
  Sampler m(p);
  seen.clear();
  for (int i = 0; i < 500; ++i) seen[m.sample(l, {})]++;
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen.count(3));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  std::vector<float> l = {10.f, 0.f, 0.f, 0.f};  // p(0) ~ 0.9999
  SamplerParams p;
  p.temperature = 1.f;
  p.top_k = 0;
  p.min_p = 0.f;
  p.top_p = 0.9f;
  Sampler s(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l, {}), 0);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplerParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.f;
  Sampler s(p);
  const std::vector<float> l = {3.f, 2.f, -1.f};
  const std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.sample(l, hist), 1);  // 3/2 = 1.5 < 2
}

// OpenAI's additive penalties over the last repeat_last_n tokens: presence once, frequency per
// occurrence; negative values promote. Either makes a greedy draw more than the row's argmax.
TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractFromSeenTokens) {
  const std::vector<float> l = {3.f, 2.5f, 0.f};
  SamplerParams p;
  p.temperature = 0;
  EXPECT_TRUE(p.plain_greedy());
  p.presence_penalty = 1.f;  // 3 - 1 = 2 < 2.5
  EXPECT_FALSE(p.plain_greedy());
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{2}), 0);  // an unseen token keeps its logit
  p.presence_penalty = 0.f, p.frequency_penalty = 0.4f;
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0}), 0);     // 3 - 0.4 = 2.6 > 2.5
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0, 0}), 1);  // 3 - 0.8 = 2.2 < 2.5
  p.repeat_last_n = 1;  // only the last token counts
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0, 0, 2}), 0);
  p.repeat_last_n = 64, p.frequency_penalty = -1.5f;  // promoted: 0 + 3 x 1.5 > 3
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{2, 2, 2}), 2);
  p.frequency_penalty = 0.f, p.presence_penalty = 0.75f;  // with the repetition penalty: 3 / 1.2 - 0.75 = 1.75
  p.repeat_penalty = 1.2f;
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{3.f, 1.8f}, std::vector<int32_t>{0}), 1);
}

// A draw from the row's best tokens found elsewhere (a split vocabulary's ranks): the same ids,
// draw after draw (the same use of the generator), as sample() over the whole row, for every
// kind of draw it takes (top-k on, repetition penalty, greedy), with ties among the logits.
TEST(Sampler, SampleSortedDrawsAsSampleDoes) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct P { float temp; int k; float top_p, min_p, pen; };
  for (const P& pp : {P{0.8f, 40, 0.95f, 0.05f, 1}, P{1.3f, 1, 1, 0, 1}, P{0.7f, 300, 0.9f, 0, 1.3f}, P{0, 20, 1, 0, 1.2f},
                      P{1.0f, 2000, 1, 0.01f, 1}}) {
    SamplerParams p;
    p.temperature = pp.temp, p.top_k = pp.k, p.top_p = pp.top_p, p.min_p = pp.min_p, p.repeat_penalty = pp.pen, p.seed = 77;
    Sampler whole(p), sorted(p);
    for (int draw = 0; draw < 30; ++draw) {
      std::vector<float> l(1500);
      for (auto& v : l) v = nd(rng);
      for (int i = 0; i < 40; ++i) l[rng() % l.size()] = l[rng() % l.size()];  // ties
      std::vector<int32_t> history;
      for (int i = 0; i < 10; ++i) history.push_back(int32_t(rng() % l.size()));
      // the best tokens as a rank would give them: penalised, sorted, the first top-k (one if greedy)
      std::vector<std::pair<float, int32_t>> best;
      std::vector<float> pen = l;
      for (int32_t t : whole.penalty_ids(history)) pen[size_t(t)] = pen[size_t(t)] > 0 ? pen[size_t(t)] / p.repeat_penalty : pen[size_t(t)] * p.repeat_penalty;
      for (size_t i = 0; i < pen.size(); ++i) best.emplace_back(pen[i], int32_t(i));
      std::sort(best.begin(), best.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      best.resize(p.temperature <= 0 ? 1 : std::min(best.size(), size_t(p.top_k)));
      EXPECT_EQ(sorted.sample_sorted(best), whole.sample(l, history)) << "temp " << pp.temp << " top_k " << pp.k << " draw " << draw;
    }
  }
  EXPECT_EQ(Sampler(SamplerParams{}).sample_sorted({}), -1);
}

TEST(Chat, DetectsFamilies) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}"), ChatTemplate::ChatML);
  EXPECT_EQ(detect_chat_template("<|start_header_id|>x<|end_header_id|>"), ChatTemplate::Llama3);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' }} <<SYS>>"), ChatTemplate::Llama2SysBos);
  EXPECT_EQ(detect_chat_template("[INST] <<SYS>> {{ m }}"), ChatTemplate::Llama2Sys);
  EXPECT_EQ(detect_chat_template("[INST] {{ m }} [/INST]"), ChatTemplate::Llama2);
  EXPECT_EQ(detect_chat_template("{{ '<start_of_turn>' + role + '\n' }}"), ChatTemplate::Gemma);
  EXPECT_FALSE(detect_chat_template("{{ something else }}").has_value());
}

TEST(Chat, RendersAsLlamaCpp) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "Hello"}, {"assistant", "Hi"}, {"user", "Q"}};
  EXPECT_EQ(apply_chat_template(ChatTemplate::ChatML, m, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi<|im_end|>\n"
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatTemplate::Llama2Sys, m, true),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nHello [/INST]Hi</s>[INST] Q [/INST]");
  EXPECT_EQ(apply_chat_template(ChatTemplate::Llama3, m, true),
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // Gemma's turns (its model card): no system turn, the system text opens the first user turn.
  EXPECT_EQ(apply_chat_template(ChatTemplate::Gemma, m, true),
            "<start_of_turn>user\nS\n\nHello<end_of_turn>\n<start_of_turn>model\nHi<end_of_turn>\n"
            "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n");
  const std::vector<ChatMessage> m2 = {{"user", "Hi"}, {"assistant", "Hello"}};
  EXPECT_EQ(apply_chat_template(ChatTemplate::MistralV1, m2, false), " [INST] Hi [/INST] Hello</s>");
  EXPECT_EQ(apply_chat_template(ChatTemplate::MistralV3, m2, false), "[INST] Hi[/INST] Hello</s>");
  EXPECT_EQ(apply_chat_template(ChatTemplate::MistralV3Tekken, m2, false), "[INST]Hi[/INST]Hello</s>");
}

TEST(Chat, NamesRoundTrip) {
  for (const char* n : {"chatml", "gemma", "llama2", "llama3", "mistral-v7"}) {
    auto t = chat_template_from_name(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(chat_template_name(*t), n);
  }
  EXPECT_FALSE(chat_template_from_name("jinja").has_value());
}
