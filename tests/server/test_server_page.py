"""test_server_page.py - the chat page at / in headless Chromium (Debian chromium + chromium-driver,
driven by selenium from build/venv): it shows the model info, streams an answer token by token,
puts reasoning in a collapsed block, shows a tool call, reports cached tokens on the second turn,
and its Stop button cancels the generation on the server. Then: Markdown (marked, embedded in the
binary) with code blocks and their copy buttons and model HTML shown as text, conversations kept
across a reload (localStorage), the settings panel (system prompt, sampling) in the request, the
favicon; a failed turn (marked, never resent, Retry / Edit, nothing empty saved), no image button
without a projector, styled tables, the narrow layout. TEST-ONLY scripted engine."""
import pathlib
import shutil
import time
import urllib.request

from srvtest import SCRIPT, Server, check, ensure_venv, report

ensure_venv(["selenium"])
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def browser():
    opts = webdriver.ChromeOptions()
    for a in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-dev-shm-usage", "--window-size=1200,900"]:
        opts.add_argument(a)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(service=service, options=opts)


def wait_for(fn, what, timeout=15):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - the element may not exist yet
            last = e
        time.sleep(0.02)
    check(False, f"timed out waiting for {what} (last: {last!r})")
    return None


def send(drv, text):
    box = drv.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    drv.find_element(By.ID, "send").click()


def last_assistant(drv):
    return drv.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def main():
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        check(False, "chromium and chromium-driver are required: run `bash scripts/install-deps.sh --test`")
        report("test_server_page.py")
    md = (" to=user<|message|>Here:\n\n```python\nprint(1)\n```\n\n**bold** <img src=x onerror=\"window.pwned=1\">"
          " [bad](javascript:window.pwned=2) [good](https://example.com/)")
    table = " to=user<|message|>| name | n |\n|---|---|\n| a | 1 |\n| b | 2 |\n"
    script = dict(SCRIPT, token_delay_ms=25, rules=[{"match": "markdown please", "output": md},
                                                    {"match": "table please", "output": table}] + SCRIPT["rules"])
    with Server(script, "--parallel", "1") as srv:
        drv = browser()
        try:
            drv.get(srv.base + "/")
            check(drv.title == "muse chat", f"page title {drv.title!r}")
            info = wait_for(lambda: "context" in drv.find_element(By.ID, "model-info").text and
                            drv.find_element(By.ID, "model-info").text, "model info")
            check(info and "muse-test" in info and "2048" in info, f"model/context info shown: {info!r}")

            # 1. a streamed answer: the text grows in several steps before it is complete
            send(drv, "hello page")
            seen = set()
            want = "You said: hello page"
            deadline = time.time() + 20
            while time.time() < deadline:
                msgs = drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .content")
                text = msgs[-1].text if msgs else ""
                if text:
                    seen.add(text)
                if text == want and drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats"):
                    break
                time.sleep(0.01)
            partial = [t for t in seen if t != want and want.startswith(t)]
            check(want in seen, f"final streamed text {sorted(seen)[-3:]}")
            check(len(partial) >= 2, f"text arrived in pieces (saw {len(partial)} partial states)")
            a = last_assistant(drv)
            det = a.find_element(By.CSS_SELECTOR, "details.reasoning")
            check(det.get_attribute("open") is None, "reasoning collapsed by default")
            det.find_element(By.TAG_NAME, "summary").click()
            check(det.find_element(By.CSS_SELECTOR, ".reasoning-body").text == "The user said something.",
                  "reasoning text in its block")
            check("finish: stop" in a.find_element(By.CSS_SELECTOR, ".stats").text, "finish reason shown")

            # 2. the second turn reuses the first one's cache, and the page says so
            send(drv, "second turn")
            stats = wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")) == 2 and
                             drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text, "second answer")
            check(stats and "(0 cached)" not in stats and "cached" in stats, f"cached tokens shown: {stats!r}")

            # 3. a tool call is shown
            send(drv, "weather in Paris")
            call = wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".tool-call") and
                            drv.find_elements(By.CSS_SELECTOR, ".tool-call")[0].text, "tool call")
            check(call and "get_weather" in call and "Paris" in call, f"tool call shown: {call!r}")
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")) == 3, "tool turn done")

            # 4. Stop cancels the generation on the server
            send(drv, "slow stream please")
            wait_for(lambda: "tick" in last_assistant(drv).find_element(By.CSS_SELECTOR, ".content").text, "slow text")
            drv.find_element(By.ID, "stop").click()
            stats = wait_for(lambda: last_assistant(drv).find_elements(By.CSS_SELECTOR, ".stats") and
                             last_assistant(drv).find_element(By.CSS_SELECTOR, ".stats").text, "stopped stats")
            check(stats and "stopped" in stats, f"stop shown: {stats!r}")
            ok = wait_for(lambda: srv.metrics()["muse_slots_busy"] == 0 and
                          srv.metrics()["muse_requests_cancelled_total"] >= 1, "server-side cancel", timeout=5)
            check(bool(ok), "Stop frees the slot on the server")
            check(not drv.find_element(By.ID, "send").get_attribute("disabled"), "send enabled again")

            # 5. Markdown: a code block with a copy button, bold text, model HTML and script links inert
            send(drv, "markdown please")
            code = wait_for(lambda: last_assistant(drv).find_elements(By.CSS_SELECTOR, ".content pre code") and
                            last_assistant(drv).find_elements(By.CSS_SELECTOR, ".stats") and
                            last_assistant(drv).find_element(By.CSS_SELECTOR, ".content pre code").text, "code block")
            check(code == "print(1)", f"code block rendered: {code!r}")
            a = last_assistant(drv)
            check(a.find_element(By.CSS_SELECTOR, ".content strong").text == "bold", "bold rendered")
            check(not a.find_elements(By.CSS_SELECTOR, ".content img") and "<img" in a.find_element(By.CSS_SELECTOR, ".content").text,
                  "model HTML shown as text, not run")
            links = {e.text: e.get_attribute("href") for e in a.find_elements(By.CSS_SELECTOR, ".content a")}
            check(links == {"good": "https://example.com/"}, f"only safe links: {links}")
            check(drv.execute_script("return window.pwned === undefined"), "nothing of the model's ran")
            btn = a.find_element(By.CSS_SELECTOR, "pre button.copy")
            btn.click()
            lbl = wait_for(lambda: btn.text != "copy" and btn.text, "copy button feedback", timeout=5)
            check(lbl == "copied", f"copy button copies ({lbl!r})")

            # 6. the conversation survives a reload; the list shows it; a new chat starts empty
            n_msgs = len(drv.find_elements(By.CSS_SELECTOR, ".msg"))
            drv.refresh()
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg")) == n_msgs, "messages after reload")
            check(len(drv.find_elements(By.CSS_SELECTOR, ".msg")) == n_msgs, f"{n_msgs} messages after reload")
            check(drv.find_element(By.CSS_SELECTOR, ".msg.assistant .content pre code").text == "print(1)" or
                  any(e.text == "print(1)" for e in drv.find_elements(By.CSS_SELECTOR, "pre code")),
                  "Markdown rendered again after reload")
            titles = [e.text for e in drv.find_elements(By.CSS_SELECTOR, "#convs li .title")]
            check(titles == ["hello page"], f"conversation list {titles}")
            drv.find_element(By.ID, "clear").click()
            check(not drv.find_elements(By.CSS_SELECTOR, ".msg"), "new chat is empty")

            # 7. settings: system prompt and sampling go into the request, and are kept
            drv.execute_script("window._bodies = []; const f = window.fetch; window.fetch = (u, o) => {"
                               " if (o && o.body) window._bodies.push(JSON.parse(o.body)); return f(u, o); };")
            drv.find_element(By.CSS_SELECTOR, "#settings summary").click()
            sysbox = drv.find_element(By.ID, "system")
            sysbox.send_keys("Answer in French.")
            temp = drv.find_element(By.ID, "temperature")
            temp.clear()
            temp.send_keys("0.3")
            drv.find_element(By.ID, "top-k").click()  # blur: the change events store the settings
            send(drv, "bonjour")
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")) == 1, "answer with settings")
            bodies = drv.execute_script("return window._bodies")
            b = bodies[-1] if bodies else {}
            check(b.get("messages", [{}])[0] == {"role": "system", "content": "Answer in French."} and
                  b.get("temperature") == 0.3 and b.get("top_k") == 64 and b.get("top_p") == 0.95,
                  f"request carries the settings: {b}")
            titles = [e.text for e in drv.find_elements(By.CSS_SELECTOR, "#convs li .title")]
            check(titles == ["bonjour", "hello page"], f"two conversations listed: {titles}")
            drv.find_elements(By.CSS_SELECTOR, "#convs li .title")[1].click()
            check(len(drv.find_elements(By.CSS_SELECTOR, ".msg")) == n_msgs, "switching back shows the first conversation")
            drv.refresh()
            check(drv.find_element(By.ID, "system").get_attribute("value") == "Answer in French." and
                  drv.find_element(By.ID, "temperature").get_attribute("value") == "0.3", "settings kept across reloads")

            # 9. a failed turn (issue 32 item 1): marked, never sent again, Retry and Edit; after a reload no
            # empty answer comes back; an old page's empty answers are dropped; no image button without a
            # projector; tables styled; the narrow layout
            check(not drv.find_element(By.ID, "attach").is_displayed(), "no image button without a projector")
            drv.find_element(By.ID, "clear").click()
            top_p = "const t = document.getElementById('top-p'); t.value = arguments[0];" \
                    " t.dispatchEvent(new Event('change'));"
            hook = ("window._bodies = []; const f = window.fetch; window.fetch = (u, o) => {"
                    " if (o && o.body) window._bodies.push(JSON.parse(o.body)); return f(u, o); };")
            drv.execute_script(hook)
            drv.execute_script(top_p, "2")  # out of range: the server answers 400
            send(drv, "this one fails")
            note = wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".msg.user.failed .failed-note") and
                            drv.find_element(By.CSS_SELECTOR, ".msg.user.failed .failed-note").text, "failed turn")
            check(note and "top_p" in note, f"the failed turn says why: {note!r}")
            check(not drv.find_elements(By.CSS_SELECTOR, ".msg.assistant"), "no empty answer bubble for it")
            drv.execute_script(top_p, "0.95")
            send(drv, "after the failure")
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")) == 1, "answer after failure")
            b = drv.execute_script("return window._bodies")[-1]
            sent = [m.get("content") for m in b.get("messages", [])]
            check("this one fails" not in sent and "after the failure" in sent, f"the failed message is not resent: {sent}")
            drv.refresh()
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".msg.user.failed"), "failed turn after reload")
            check(len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 1 and
                  all(e.text for e in drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .content")),
                  "after a reload: the one real answer, no empty bubble")
            drv.execute_script(hook)
            drv.find_element(By.CSS_SELECTOR, ".msg.user.failed button.retry").click()
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2 and
                     last_assistant(drv).find_elements(By.CSS_SELECTOR, ".stats"), "retried turn")
            check(not drv.find_elements(By.CSS_SELECTOR, ".msg.user.failed") and
                  "You said: this one fails" in last_assistant(drv).text, "Retry sends it again and it is answered")
            b = drv.execute_script("return window._bodies")[-1]
            check([m["content"] for m in b["messages"] if m["role"] == "user"] == ["after the failure", "this one fails"],
                  f"the retried request: {b['messages']}")
            # an older page saved failed turns as empty answers: they are dropped on load
            drv.execute_script("const cs = JSON.parse(localStorage.getItem('muse-conversations'));"
                               " cs[0].messages.push({role: 'user', content: 'old'}, {role: 'assistant', content: ''});"
                               " localStorage.setItem('muse-conversations', JSON.stringify(cs));")
            drv.refresh()
            wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".msg.user")) == 3, "reloaded old conversation")
            check(len(drv.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2, "the old empty answer is not shown")
            drv.execute_script(hook)
            send(drv, "table please")
            cell = wait_for(lambda: last_assistant(drv).find_elements(By.CSS_SELECTOR, ".stats") and
                            last_assistant(drv).find_elements(By.CSS_SELECTOR, ".content table th"), "a table")
            th = cell[0] if cell else None
            check(th is not None and th.value_of_css_property("border-top-style") == "solid", "tables have borders")
            b = drv.execute_script("return window._bodies")[-1]
            check(all(m.get("content") for m in b["messages"] if m["role"] == "assistant"),
                  "no empty assistant message is sent")
            drv.set_window_size(420, 900)
            side, main = drv.find_element(By.ID, "side"), drv.find_element(By.ID, "main")
            check(side.rect["y"] + side.rect["height"] <= main.rect["y"] + 1 and main.rect["width"] <= 420,
                  f"narrow screen: the list above the chat ({side.rect}, {main.rect})")
            drv.set_window_size(1200, 900)

            # 8. favicon, and marked served from the binary
            icon = drv.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
            with urllib.request.urlopen(icon, timeout=5) as resp:
                check(resp.status == 200 and resp.headers["Content-Type"] == "image/svg+xml" and b"<svg" in resp.read(),
                      "favicon served")
            with urllib.request.urlopen(srv.base + "/vendor/marked.min.js", timeout=5) as resp:
                want = pathlib.Path("/usr/share/javascript/marked/marked.min.js").read_bytes()
                check(resp.read() == want, "marked.min.js served byte for byte from the binary")
        finally:
            drv.quit()
    report("test_server_page.py")


if __name__ == "__main__":
    main()
