// Chat templates: the family is recognised from tokenizer.chat_template as llama.cpp does
// (substring checks, formats.md §5) and rendered with fixed strings, no Jinja.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lamina {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatTemplate { ChatML, Gemma, Llama2, Llama2Sys, Llama2SysBos, Llama2SysStrip, Llama3, MistralV1, MistralV3,
                          MistralV3Tekken, MistralV7 };

// Names accepted by --template: chatml, gemma, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip,
// llama3, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7.
std::optional<ChatTemplate> chat_template_from_name(const std::string& name);
std::string chat_template_name(ChatTemplate t);
std::string chat_template_names();
// Recognises the template source; nullopt when it is none of the known families.
std::optional<ChatTemplate> detect_chat_template(const std::string& source);
// The prompt text for the conversation, ending with the assistant's turn opening when
// add_generation_prompt. Tokenise it with parse_special = true.
std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& msgs, bool add_generation_prompt);

}  // namespace lamina
