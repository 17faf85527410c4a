// The chat page lamina serve gives at "/": one static HTML file with its script inline (no build
// step, no external assets). It keeps the conversation in the page and streams each answer from
// /v1/chat/completions (server-sent events read with fetch), with the API key, when the server
// asks for one, kept in the browser's local storage.
#include "server/chat_page.h"

namespace lamina::server {

const char* chat_page_html() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lamina</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f6f6f4; color: #222; }
  main { max-width: 760px; margin: 0 auto; padding: 16px; display: flex; flex-direction: column; height: 100vh; box-sizing: border-box; }
  h1 { font-size: 18px; margin: 0 0 8px; }
  #log { flex: 1; overflow-y: auto; }
  .msg { white-space: pre-wrap; padding: 8px 12px; border-radius: 8px; margin: 6px 0; }
  .user { background: #dde8f6; margin-left: 15%; }
  .assistant { background: #fff; border: 1px solid #ddd; margin-right: 15%; }
  .error { background: #fbe3e3; }
  form { display: flex; gap: 8px; margin-top: 8px; }
  textarea { flex: 1; font: inherit; padding: 8px; resize: vertical; min-height: 44px; }
  button { font: inherit; padding: 0 16px; }
  #key { display: none; margin-top: 8px; }
</style>
</head>
<body>
<main>
  <h1>lamina <span id="model"></span></h1>
  <div id="log"></div>
  <input id="key" type="password" placeholder="API key (the server asks for one)">
  <form id="form">
    <textarea id="input" placeholder="Ask something (Enter sends, Shift+Enter breaks the line)"></textarea>
    <button id="send" type="submit">Send</button>
  </form>
</main>
<script>
const log = document.getElementById("log"), input = document.getElementById("input");
const keyBox = document.getElementById("key"), send = document.getElementById("send");
const messages = [];
keyBox.value = localStorage.getItem("lamina-key") || "";
function bubble(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role;
  d.textContent = text;
  log.appendChild(d);
  log.scrollTop = log.scrollHeight;
  return d;
}
function headers() {
  const h = {"Content-Type": "application/json"};
  if (keyBox.value) h["Authorization"] = "Bearer " + keyBox.value;
  return h;
}
fetch("/v1/models", {headers: headers()}).then(r => r.json()).then(j => {
  if (j.data) document.getElementById("model").textContent = "· " + j.data[0].id;
  if (j.error) keyBox.style.display = "block";
}).catch(() => {});
async function ask(question) {
  messages.push({role: "user", content: question});
  bubble("user", question);
  const out = bubble("assistant", "");
  send.disabled = true;
  let answer = "";
  try {
    localStorage.setItem("lamina-key", keyBox.value);
    const res = await fetch("/v1/chat/completions", {method: "POST", headers: headers(),
      body: JSON.stringify({messages: messages, stream: true})});
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      if (res.status === 401) keyBox.style.display = "block";
      throw new Error(j.error ? j.error.message : res.statusText);
    }
    const reader = res.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 2);
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const ev = JSON.parse(line.slice(6));
        if (ev.error) throw new Error(ev.error.message);
        const delta = ev.choices && ev.choices[0] && ev.choices[0].delta;
        if (delta && delta.content) { answer += delta.content; out.textContent = answer; log.scrollTop = log.scrollHeight; }
      }
    }
    messages.push({role: "assistant", content: answer});
    out.dataset.done = "1";
  } catch (e) {
    out.className = "msg assistant error";
    out.textContent = (answer ? answer + "\n" : "") + "Error: " + e.message;
    out.dataset.done = "1";
    messages.pop();
  } finally {
    send.disabled = false;
    input.focus();
  }
}
document.getElementById("form").addEventListener("submit", e => {
  e.preventDefault();
  const q = input.value.trim();
  if (!q || send.disabled) return;
  input.value = "";
  ask(q);
});
input.addEventListener("keydown", e => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); document.getElementById("form").requestSubmit(); }
});
input.focus();
</script>
</body>
</html>
)HTML";
}

}  // namespace lamina::server
