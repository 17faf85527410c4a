// The static chat page of lamina serve (served at "/"): chat_page.cpp.
#pragma once

namespace lamina::server {

const char* chat_page_html();

}  // namespace lamina::server
