"""test_server_page.py - the chat page at / in headless Chromium (Debian chromium + chromium-driver,
driven by selenium from build/venv): it shows the model info, streams an answer token by token,
puts reasoning in a collapsed block, shows a tool call, reports cached tokens on the second turn,
and its Stop button cancels the generation on the server. TEST-ONLY scripted engine."""
import shutil
import time

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
    script = dict(SCRIPT, token_delay_ms=25)
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
        finally:
            drv.quit()
    report("test_server_page.py")


if __name__ == "__main__":
    main()
