#!/usr/bin/env python3
"""Load benchmark of an OpenAI-compatible server (lamina serve, llama-server, ...): closed loop
over HTTP with streaming. For each concurrency N, N clients each send a streaming
/v1/completions request (a prompt of about -p tokens, exactly -n generated: ignore_eos), and
send the next when it ends, until 2N requests have finished. Reports the columns of
`lamina bench --parallel`: output tok/s over the run, time to first token and inter-token
latency p50/p99, and failures. Standard library only.

  scripts/bench-serve.py --url http://127.0.0.1:8080 --concurrency 1,16,64 -p 128 -n 128
"""
import argparse, http.client, json, random, sys, threading, time, urllib.parse


def percentile(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def one_request(url, prompt, n_gen, timeout):
    """Streams one completion; returns (first_token_s, [token times], tokens) or raises."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    body = json.dumps({"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:200]!r}")
    times, tokens, buf = [], 0, b""
    while True:
        chunk = res.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            line, buf = buf.split(b"\n\n", 1)
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            elif ev["choices"] and ev["choices"][0].get("text"):
                times.append(time.perf_counter() - t0)
    conn.close()
    return times, tokens


def run(url, n_par, n_prompt, n_gen, words, timeout):
    total = 2 * n_par
    lock = threading.Lock()
    state = {"left": total, "tokens": 0, "fail": 0, "ttft": [], "itl": []}

    def client():
        while True:
            with lock:
                if state["left"] == 0:
                    return
                state["left"] -= 1
            prompt = " ".join(random.choice(words) for _ in range(n_prompt))
            try:
                times, tokens = one_request(url, prompt, n_gen, timeout)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    state["fail"] += 1
                print(f"request failed: {e}", file=sys.stderr)
                continue
            with lock:
                state["tokens"] += tokens
                if times:
                    state["ttft"].append(times[0] * 1e3)
                    state["itl"] += [(b - a) * 1e3 for a, b in zip(times, times[1:])]

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(n_par)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return total, state["tokens"] / wall, state, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("-p", "--n-prompt", type=int, default=128, help="prompt words (about as many tokens)")
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    try:
        levels = [int(x) for x in a.concurrency.split(",")]
        assert all(x > 0 for x in levels)
    except (ValueError, AssertionError):
        sys.exit(f"bench-serve: --concurrency wants positive numbers like 1,16,64, got {a.concurrency!r}")
    words = "the of and to in is was that for it with as his on be at by had not are but from or have an they which one".split()
    random.seed(1)
    print(f"| {'concurrency':>11} | {'requests':>8} | {'failed':>6} | {'output t/s':>10} | {'TTFT p50 ms':>11} | {'TTFT p99 ms':>11} | {'ITL p50 ms':>10} | {'ITL p99 ms':>10} |")
    print(f"| {'-' * 11} | {'-' * 8} | {'-' * 6} | {'-' * 10} | {'-' * 11} | {'-' * 11} | {'-' * 10} | {'-' * 10} |")
    failed = 0
    for n in levels:
        total, tps, st, _ = run(a.url, n, a.n_prompt, a.n_gen, words, a.timeout)
        failed += st["fail"]
        print(f"| {n:>11} | {total:>8} | {st['fail']:>6} | {tps:>10.2f} | {percentile(st['ttft'], .5):>11.1f} | "
              f"{percentile(st['ttft'], .99):>11.1f} | {percentile(st['itl'], .5):>10.2f} | {percentile(st['itl'], .99):>10.2f} |", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
