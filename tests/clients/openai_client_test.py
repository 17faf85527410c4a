#!/usr/bin/env python3
"""lamina serve with real clients, on the CPU and the default model (SmolLM2): the official
`openai` package (PyPI, in scripts/deps.sh's virtual environment) for models, chat, streaming
chat and completions; 64 concurrent streaming requests that all complete with the right token
counts; bad requests interleaved with good ones, every good one answered and the server up;
a disconnect storm, after which no request runs and no KV block is held; SIGTERM exits 0.
Exit 77 (ctest: skipped, never passed) when the model or the openai package is missing."""
import http.client, json, os, re, subprocess, sys, threading, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
from lamina_venv import require  # noqa: E402

require("openai")
import openai  # noqa: E402

cli = sys.argv[1]
model = os.environ.get("LAMINA_MODEL", os.path.expanduser("~/.cache/lamina/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
if not os.path.exists(model):
    print(f"client test: no model at {model} (scripts/fetch-model.sh)", file=sys.stderr)
    sys.exit(77)

server = subprocess.Popen([cli, "serve", "-m", model, "-d", "cpu", "--port", "0", "--ctx", "8192", "--parallel", "64",
                           "--max-tokens", "16"], stderr=subprocess.PIPE, text=True)
port = None
for _ in range(2):  # "listening on ...", then "... ready on ..."
    line = server.stderr.readline()
    m = re.search(r"http://[\d.]+:(\d+)", line)
    assert m, f"serve said {line!r}"
    port = int(m.group(1))
threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()  # drain the request log
base = f"http://127.0.0.1:{port}"
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def metrics():
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    return {k: float(v) for k, v in re.findall(r"^(lamina_\w+) (\S+)$", text, re.M)}


try:
    # The official client: models, chat, streaming chat, completions.
    models = client.models.list()
    model_id = models.data[0].id
    check(model_id == os.path.splitext(os.path.basename(model))[0], f"model id {model_id}")
    chat = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                          max_tokens=12, temperature=0)
    answer = chat.choices[0].message.content
    check("Paris" in answer, f"chat answer {answer!r}")
    check(chat.usage.completion_tokens <= 12 and chat.usage.prompt_tokens > 5, f"usage {chat.usage}")
    parts, usage = [], None
    for ev in client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                             max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}):
        if ev.usage:
            usage = ev.usage
        if ev.choices and ev.choices[0].delta.content:
            parts.append(ev.choices[0].delta.content)
    check("".join(parts) == answer, f"streamed {''.join(parts)!r} != {answer!r}")
    check(usage is not None and usage.completion_tokens == chat.usage.completion_tokens, f"stream usage {usage}")
    # n choices through the official client: three of them, indexed 0..2, each its own draw.
    many = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Name a colour."}],
                                          max_tokens=8, temperature=1.0, seed=3, n=3)
    check([c.index for c in many.choices] == [0, 1, 2], f"choices {many.choices}")
    check(all(c.finish_reason in ("length", "stop") for c in many.choices), f"finish reasons {many.choices}")
    # log probabilities through the official client's types
    lp = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Name a colour."}],
                                        max_tokens=4, temperature=0, logprobs=True, top_logprobs=2, presence_penalty=0.5)
    content = lp.choices[0].logprobs.content
    check(len(content) == lp.usage.completion_tokens and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content),
          f"logprobs {lp.choices[0].logprobs}")
    comp = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=8, temperature=0)
    check(comp.choices[0].finish_reason in ("length", "stop") and comp.usage.completion_tokens <= 8, f"completion {comp}")

    # 64 concurrent streams, each exactly 16 tokens (ignore_eos).
    counts = [None] * 64

    def stream(i):
        try:
            n = None
            for ev in client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": f"Count to {i}."}],
                                                     max_tokens=16, temperature=0.7, seed=i, stream=True,
                                                     stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                if ev.usage:
                    n = ev.usage.completion_tokens
            counts[i] = n
        except Exception as e:  # noqa: BLE001
            counts[i] = repr(e)
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(64)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(c == 16 for c in counts), f"64 streams: {counts}")
    print(f"64 concurrent streams of 16 tokens in {time.time() - t0:.1f} s")

    # Bad requests interleaved with good ones.
    bad_bodies = ["{not json", json.dumps({"max_tokens": 3}), json.dumps({"messages": "hi"}),
                  json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
                  json.dumps({"messages": [{"role": "wizard", "content": "x"}]}),
                  json.dumps({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}),
                  json.dumps({"messages": [{"role": "user", "content": "x" * 40000}]})]
    bad_status, good = [], []

    def bad_worker(k):
        for j in range(40):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/chat/completions", bad_bodies[(j + k) % len(bad_bodies)], {"Content-Type": "application/json"})
            r = conn.getresponse()
            body = r.read()
            bad_status.append((r.status, b'"error"' in body))
            conn.close()

    def good_worker(k):
        try:
            c = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": f"Hi {k}"}], max_tokens=6)
            good.append(c.choices[0].finish_reason)
        except Exception as e:  # noqa: BLE001
            good.append(repr(e))
    ts = [threading.Thread(target=bad_worker, args=(k,)) for k in range(5)] + [threading.Thread(target=good_worker, args=(k,)) for k in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(len(bad_status) == 200 and all(400 <= s < 500 and e for s, e in bad_status), f"bad requests: {sorted(set(bad_status))}")
    check(len(good) == 16 and all(g in ("stop", "length") for g in good), f"good among bad: {good}")

    # A disconnect storm: streams dropped after their first event; then nothing runs, no KV held.
    for k in range(32):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": f"Story {k}:", "max_tokens": 200, "ignore_eos": True, "stream": True}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read1(100)
        conn.sock.close()
        conn.close()
    deadline = time.time() + 120
    while time.time() < deadline:
        m = metrics()
        if m["lamina_requests_running"] == 0 and m["lamina_kv_blocks_used"] == 0:
            break
        time.sleep(0.5)
    m = metrics()
    check(m["lamina_requests_running"] == 0 and m["lamina_kv_blocks_used"] == 0, f"after the storm: {m}")
    check(urllib.request.urlopen(base + "/health", timeout=30).status == 200, "health after everything")
finally:
    server.terminate()
    rc = server.wait(timeout=120)
check(rc == 0, f"SIGTERM exit status {rc}")
if failures:
    sys.exit(1)
print("openai client test: all checks passed")
