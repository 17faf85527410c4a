#include "model/chat.h"

#include <array>
#include <utility>

namespace lamina {

namespace {

constexpr std::array<std::pair<const char*, ChatTemplate>, 11> kNames = {{
    {"chatml", ChatTemplate::ChatML},
    {"gemma", ChatTemplate::Gemma},
    {"llama2", ChatTemplate::Llama2},
    {"llama2-sys", ChatTemplate::Llama2Sys},
    {"llama2-sys-bos", ChatTemplate::Llama2SysBos},
    {"llama2-sys-strip", ChatTemplate::Llama2SysStrip},
    {"llama3", ChatTemplate::Llama3},
    {"mistral-v1", ChatTemplate::MistralV1},
    {"mistral-v3", ChatTemplate::MistralV3},
    {"mistral-v3-tekken", ChatTemplate::MistralV3Tekken},
    {"mistral-v7", ChatTemplate::MistralV7},
}};

bool has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

std::string render_llama2(ChatTemplate t, const std::vector<ChatMessage>& msgs) {
  const bool sys = t != ChatTemplate::Llama2, bos = t == ChatTemplate::Llama2SysBos,
             strip = t == ChatTemplate::Llama2SysStrip;
  std::string out = "[INST] ";
  bool inside_turn = true;
  for (const auto& m : msgs) {
    const std::string c = strip ? trim(m.content) : m.content;
    if (!inside_turn) {
      inside_turn = true;
      out += bos ? "<s>[INST] " : "[INST] ";
    }
    if (m.role == "system") {
      out += sys ? "<<SYS>>\n" + c + "\n<</SYS>>\n\n" : c + "\n";
    } else if (m.role == "user") {
      out += c + " [/INST]";
    } else {
      out += c + "</s>";
      inside_turn = false;
    }
  }
  return out;
}

std::string render_mistral(ChatTemplate t, const std::vector<ChatMessage>& msgs) {
  std::string out;
  if (t == ChatTemplate::MistralV7) {
    for (const auto& m : msgs) {
      if (m.role == "system") out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
      else if (m.role == "user") out += "[INST] " + m.content + "[/INST]";
      else out += " " + m.content + "</s>";
    }
    return out;
  }
  const std::string L = t == ChatTemplate::MistralV1 ? " " : "";
  const std::string T = t == ChatTemplate::MistralV3Tekken ? "" : " ";
  const bool trim_assistant = t == ChatTemplate::MistralV3;
  bool open = false;
  for (const auto& m : msgs) {
    if (m.role == "system" || m.role == "user") {
      if (!open) {
        out += L + "[INST]" + T;
        open = true;
      }
      out += m.role == "system" ? m.content + "\n\n" : m.content + L + "[/INST]";
      if (m.role == "user") open = false;
    } else {
      out += T + (trim_assistant ? trim(m.content) : m.content) + "</s>";
    }
  }
  return out;
}

// Gemma has no system turn: the system text opens the first user turn; "assistant" is "model".
std::string render_gemma(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out, system;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const bool model = m.role == "assistant";
    out += "<start_of_turn>" + std::string(model ? "model" : m.role) + "\n";
    if (!system.empty() && !model) {
      out += system + "\n\n";
      system.clear();
    }
    out += trim(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

std::optional<ChatTemplate> chat_template_from_name(const std::string& name) {
  for (const auto& [n, t] : kNames)
    if (name == n) return t;
  return std::nullopt;
}

std::string chat_template_name(ChatTemplate t) {
  for (const auto& [n, tt] : kNames)
    if (tt == t) return n;
  return "?";
}

std::string chat_template_names() {
  std::string s;
  for (const auto& [n, t] : kNames) s += std::string(s.empty() ? "" : ", ") + n;
  return s;
}

std::optional<ChatTemplate> detect_chat_template(const std::string& src) {
  if (has(src, "<|im_start|>")) return ChatTemplate::ChatML;
  if (has(src, "[SYSTEM_PROMPT]")) return ChatTemplate::MistralV7;
  if (has(src, "[INST]")) {
    if (has(src, "[AVAILABLE_TOOLS]") || has(src, "[TOOL_CALLS]")) {
      if (has(src, "' [INST] ' + system_message") || has(src, "[INST] ")) return ChatTemplate::MistralV3;
      return ChatTemplate::MistralV3Tekken;
    }
    if (has(src, "<<SYS>>")) {
      if (has(src, "bos_token + '[INST]")) return ChatTemplate::Llama2SysBos;
      if (has(src, "content.strip()")) return ChatTemplate::Llama2SysStrip;
      return ChatTemplate::Llama2Sys;
    }
    return ChatTemplate::Llama2;
  }
  if (has(src, "<|start_header_id|>") && has(src, "<|end_header_id|>")) return ChatTemplate::Llama3;
  if (has(src, "<start_of_turn>")) return ChatTemplate::Gemma;
  return std::nullopt;
}

std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  switch (t) {
    case ChatTemplate::ChatML:
      for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (gen) out += "<|im_start|>assistant\n";
      return out;
    case ChatTemplate::Llama3:
      for (const auto& m : msgs)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
      if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatTemplate::Gemma:
      return render_gemma(msgs, gen);
    case ChatTemplate::Llama2: case ChatTemplate::Llama2Sys: case ChatTemplate::Llama2SysBos:
    case ChatTemplate::Llama2SysStrip:
      return render_llama2(t, msgs);
    default:
      return render_mistral(t, msgs);
  }
}

}  // namespace lamina
