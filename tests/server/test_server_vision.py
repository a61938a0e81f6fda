"""test_server_vision.py - images through `muse serve` (issue 11): the official openai client sends a
base64 PNG as an image_url content part to /v1/chat/completions on the vision goldens' text model
and projector (--image-max-tokens 64). Checks: the prompt holds the image's rows (usage counts 64
rows + the two markers more than the same text alone); a follow-up turn with the same image reuses
the whole image from the slot's cache (cached_tokens past it) and gives the same greedy tokens as a
cold slot; a different image of the same size stops reuse at its first row; two images in one
message; a remote http(s) URL, a non-data URL, bad base64 and bytes that are no image are 400 with
a clear message; a server started with --no-mmproj answers 400 to an image; the projector beside
the model is found and named in the log; the chat page (headless Chromium) attaches an image with
its Image button, shows the thumbnail, sends it and reports the image rows in the prompt count."""
import base64
import os
import pathlib
import shutil
import tempfile

from srvtest import check, ensure_venv, report
from test_server_real import RealServer

ensure_venv(["openai"])
import openai  # noqa: E402

SHARED = pathlib.Path(os.environ.get("MUSE_SHARED", pathlib.Path(__file__).resolve().parents[2] / ".." / "shared"))
G = SHARED / "golden" / "vision"
TM = str(G / "models" / "vis-text-4l-256.gguf")
MM = str(G / "models" / "vis-mmproj.gguf")


def data_uri(path, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(pathlib.Path(path).read_bytes()).decode()


def main():
    img_a = data_uri(G / "images" / "img_336x336_gradient.png")
    img_b = data_uri(G / "images" / "img_700x300_text.png")
    img_c = data_uri(G / "images" / "img_96x64_small.png")
    with RealServer(TM, "--mmproj", MM, "--image-max-tokens", "64", "--ctx-size", "1024") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)

        def chat(messages, n=6):
            return cl.chat.completions.create(model="m", messages=messages, max_tokens=n, temperature=0)

        def user(*parts):
            return {"role": "user", "content": [
                {"type": "text", "text": p} if not is_url(p) else
                {"type": "image_url", "image_url": {"url": p}} for p in parts]}

        def is_url(p):
            return p.startswith(("data:", "http:", "https:", "file:"))

        text_only = chat([{"role": "user", "content": "describe this image"}])
        r1 = chat([user(img_a, "describe this image")])
        n0, n1 = text_only.usage.prompt_tokens, r1.usage.prompt_tokens
        check(n1 == n0 + 64 + 2, f"image prompt: {n1} tokens = text {n0} + 64 rows + 2 markers")
        check(len(r1.choices[0].message.content or "") > 0 or r1.usage.completion_tokens > 0, "image reply generated")
        # follow-up turn with the same image: the image comes from the slot's cache
        turn2 = [user(img_a, "describe this image"), {"role": "assistant", "content": r1.choices[0].message.content},
                 user("and the colours?")]
        warm = chat(turn2)
        cached = warm.usage.prompt_tokens_details.cached_tokens if warm.usage.prompt_tokens_details else 0
        check(cached >= n1 - 1, f"follow-up reuses the image: {cached} cached of {warm.usage.prompt_tokens}")
        mt = srv.metrics()
        check(mt.get("muse_image_encodes_total") == 1 and mt.get("muse_image_tokens_encoded_total") == 64,
              f"one tower run for two turns with the same image (/metrics: {mt.get('muse_image_encodes_total')})")
        chat([{"role": "user", "content": "unrelated"}])  # evict the slot's prefix
        cold = chat(turn2)
        check(cold.choices[0].message.content == warm.choices[0].message.content, "follow-up: warm == cold")
        mt = srv.metrics()
        check(mt.get("muse_image_encodes_total") == 1 and mt.get("muse_image_cache_hits_total", 0) >= 1,
              "the slot re-evaluated the image from the rows cache: no second tower run")
        # another image with as many rows at the same place: reuse stops at its first row
        chat([user(img_a, "describe this image")])
        other = data_uri(G / "encoder" / "enc_336x336_cap64.input_resized.png")  # 224x224: 64 rows too
        r3 = chat([user(other, "describe this image")])
        c3 = r3.usage.prompt_tokens_details.cached_tokens if r3.usage.prompt_tokens_details else 0
        check(r3.usage.prompt_tokens == n1 and c3 < n1 - 64 - 1,
              f"other image, same row count: {c3} cached of {r3.usage.prompt_tokens} (reuse stops at the image)")
        one = chat([user(img_c, "x")]).usage.prompt_tokens
        two = chat([user(img_c, "x", img_c)]).usage.prompt_tokens
        check(two == one + 6 + 2, f"two images in one message: {two} tokens = {one} + 6 rows + 2 markers")
        r_b = chat([user(img_b, "describe this image")])
        check(r_b.usage.prompt_tokens == n0 + 60 + 2, f"700x300 image: {r_b.usage.prompt_tokens} = {n0} + 60 + 2")
        # errors: 400 with a message that says what to do
        page_check(srv, n1)
        # the Ollama client: base64 images in a message read the same rows
        ensure_venv(["ollama"])
        import ollama
        ol = ollama.Client(host=srv.base)
        b64 = data_uri(G / "images" / "img_300x700_portrait.png").split(",", 1)[1]  # not seen before
        enc0 = srv.metrics().get("muse_image_encodes_total")
        res = ol.chat(model="m", messages=[{"role": "user", "content": "describe this image", "images": [b64]}],
                      options={"temperature": 0, "num_predict": 2}, stream=False)
        enc1 = srv.metrics().get("muse_image_encodes_total")
        check(enc1 == enc0 + 1 and res.prompt_eval_count > 20,
              f"ollama images: the image goes through the tower (encodes {enc0} -> {enc1}, "
              f"prompt_eval_count {res.prompt_eval_count})")
        # a request's images share one decoded-pixel budget (2^26): two 6000x6000 blanks exceed it
        big = "data:image/png;base64," + base64.b64encode(blank_png(6000, 6000)).decode()
        try:
            chat([user(big, "a", big, "b")])
            check(False, "two 36-Mpixel images: accepted")
        except openai.BadRequestError as e:
            check("pixels in all" in str(e), f"two 36-Mpixel images: 400 on the pixel budget: {e}")
        for url, want in [("https://example.com/cat.png", "not fetched"), ("file:///etc/passwd", "data: URI"),
                          ("data:image/png;base64,@@@@", "base64"),
                          ("data:image/png;base64," + base64.b64encode(b"not an image at all").decode(), "image")]:
            try:
                chat([user(url, "describe")])
                check(False, f"{url[:30]}: accepted")
            except openai.BadRequestError as e:
                check(want in str(e), f"{url[:30]}: 400 says '{want}': {e}")
    # a server without a projector refuses images clearly
    with RealServer(TM, "--no-mmproj", "--ctx-size", "512") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)
        try:
            cl.chat.completions.create(model="m", messages=[user_img(img_c)], max_tokens=2)
            check(False, "no projector: image accepted")
        except openai.BadRequestError as e:
            check("--mmproj" in str(e), f"no projector: 400 names --mmproj: {e}")
    # the projector beside the model is found and named
    d = tempfile.TemporaryDirectory()
    os.symlink(os.path.realpath(TM), os.path.join(d.name, "text.gguf"))
    os.symlink(os.path.realpath(MM), os.path.join(d.name, "x-mmproj.gguf"))
    with RealServer(os.path.join(d.name, "text.gguf"), "--ctx-size", "512") as srv:
        check("using the vision projector" in srv.logtext(), "serve: projector beside the model named in the log")
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)
        r = cl.chat.completions.create(model="m", messages=[user_img(img_c)], max_tokens=2, temperature=0)
        check(r.usage.prompt_tokens > 6, "serve: discovered projector reads the image")
    d.cleanup()
    shutil.rmtree(d.name, ignore_errors=True)
    report("test_server_vision")


def blank_png(w, h):
    """A w x h black RGB PNG (small compressed, large decoded)."""
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    raw = b"".join(b"\0" + bytes(w * 3) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def page_check(srv, n_with_image):
    """The chat page: Image button -> thumbnail -> sent as an image_url part -> prompt count."""
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        check(False, "chromium and chromium-driver are required: run `bash scripts/install-deps.sh --test`")
        return
    ensure_venv(["selenium"])
    from selenium.webdriver.common.by import By
    from test_server_page import browser, wait_for
    drv = browser()
    try:
        drv.get(srv.base + "/")
        info = wait_for(lambda: "images" in drv.find_element(By.ID, "model-info").text, "model info says images")
        check(bool(info), "page: model info advertises images")
        drv.find_element(By.ID, "file").send_keys(str((G / "images" / "img_336x336_gradient.png").resolve()))
        wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#attachments img.thumb"), "thumbnail of the attachment")
        drv.find_element(By.ID, "input").send_keys("describe this image")
        drv.find_element(By.ID, "send").click()
        stats = wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats") and
                         drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text, "answer stats", 60)
        check(bool(drv.find_elements(By.CSS_SELECTOR, ".msg.user img.thumb")), "page: the sent message shows the image")
        check(bool(stats) and f"{n_with_image} prompt tokens" in stats,
              f"page: the image's rows are in the prompt ({stats!r}, want {n_with_image})")
        check(not drv.find_elements(By.CSS_SELECTOR, "#attachments img.thumb"), "page: attachments cleared after send")
        drv.refresh()  # the conversation is restored from localStorage, its image with it
        check(bool(wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".msg.user img.thumb"), "restored thumbnail")),
              "page: a restored conversation shows its image")
    finally:
        drv.quit()


def user_img(url):
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "x"}]}


if __name__ == "__main__":
    main()
