#!/usr/bin/env python3
"""The chat page of `lamina serve` in a real browser: headless Chromium (Debian's) driven by
Selenium (PyPI, in scripts/deps.sh's virtual environment). Starts the server on a generated tiny
model, types a question, and waits for the streamed answer to appear; it must be the answer the
API gives the same conversation whole (same default sampling and seed). Exit 77 (ctest: skipped,
never passed) when Chromium, its driver or Selenium is missing."""
import json, os, re, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
from lamina_venv import require  # noqa: E402

require("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

cli, vocab = sys.argv[1], sys.argv[2]
for exe in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
    if not os.path.exists(exe):
        print(f"chat page test: {exe} not installed (scripts/deps.sh)", file=sys.stderr)
        sys.exit(77)

tmp = tempfile.mkdtemp()
model = os.path.join(tmp, "tiny.gguf")
subprocess.run([cli, "gen-model", "--preset", "tiny", "--type", "q8_0", "--vocab", vocab, "-o", model],
               check=True, capture_output=True)
server = subprocess.Popen([cli, "serve", "-m", model, "-d", "cpu", "--port", "0", "--template", "chatml",
                           "--max-tokens", "12", "-t", "2"], stderr=subprocess.PIPE, text=True)
driver = None
try:
    line = server.stderr.readline()
    m = re.search(r"http://([\d.]+):(\d+)", line)
    assert m, f"serve did not say where it listens: {line!r}"
    base = f"http://{m.group(1)}:{m.group(2)}"

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.get(base + "/")
    box = driver.find_element(By.ID, "input")
    box.send_keys("Hello, who are you?")
    box.send_keys(Keys.ENTER)
    WebDriverWait(driver, 120).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='1']"))
    bubbles = driver.find_elements(By.CSS_SELECTOR, ".msg")
    assert [b.get_attribute("class") for b in bubbles] == ["msg user", "msg assistant"], [b.get_attribute("class") for b in bubbles]
    assert bubbles[0].text == "Hello, who are you?", bubbles[0].text
    shown = bubbles[1].get_attribute("textContent")
    assert shown and not shown.startswith("Error"), f"no answer: {shown!r}"

    body = json.dumps({"messages": [{"role": "user", "content": "Hello, who are you?"}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    whole = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
    assert shown == whole, f"page {shown!r} != API {whole!r}"
    print(f"chat page: the streamed answer appeared ({len(shown)} characters), equal to the API's")
finally:
    if driver:
        driver.quit()
    server.terminate()
    server.wait(timeout=30)
