"""The web page at / in real headless Chromium (Debian's package), against a real `reame serve`.

Playwright drives the system's chromium through ``executable_path``; `playwright install` is
never run. The server asks for a key (``k1``), so the page must send it from its settings.
Every wait is on a condition in the page, under a generous timeout; nothing is timed.

With ``REAME_WEB_SCREENSHOTS=DIR`` the first test also saves the page at desktop and phone
sizes there (that is how ``docs/web-*.png`` are made).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, Request, Route, sync_playwright

from tests.harness import Server, start_server
from tests.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.integration

KEY = "k1"
WAIT_MS = 180_000  # a prefill of the document on one busy core; only a failure waits it out
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# About 1,400 tokens: over cache.min_tokens (256), so the server stores it.
DOCUMENT = "# Warehouse handbook\n\n" + "\n".join(
    f"- Rule {i}. Pallets in aisle {i % 7} are stacked at most {2 + i % 3} high, "
    f"and forklifts there keep to {5 + i % 4} km/h; the night shift checks them at {20 + i % 3}:00."
    for i in range(30)
)
ATTACK = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
# A reply the server could send: markup, a script, a javascript: link, and Markdown to render.
CRAFTED_REPLY = [f"Here is {ATTACK} and ", SCRIPT, " and **bold** and [a link](javascript:window.__pwned=3)."]
# Token ids that end SmolLM2's turn (<|endoftext|>, <|im_start|>, <|im_end|>): banned, the reply never ends by itself.
END_TOKENS = (0, 1, 2)


# Record every layout shift from now on, with the elements that moved.
LAYOUT_SHIFTS = """() => {
    window.__shifts = [];
    new PerformanceObserver(list => {
        for (const shift of list.getEntries()) {
            const moved = shift.sources.map(s => s.node?.id || s.node?.className);
            window.__shifts.push({ value: shift.value, moved });
        }
    }).observe({ type: "layout-shift" });
}"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "Debian's chromium is not installed (make install-test installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("web"), workers=1, server_api_keys=KEY)
    yield running
    assert not running.stop()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    path = chromium()
    launched = playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
    yield launched
    launched.close()


def open_page(browser: Browser, server: Server, **context: Any) -> Page:
    page = browser.new_context(**{"viewport": DESKTOP, **context}).new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def policy_violation(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            errors.append(message.text)

    page.on("console", policy_violation)
    page.goto(f"http://127.0.0.1:{server.port}/")
    page.wait_for_selector("body[data-ready=true]")
    assert not errors, errors  # no script error, and the policy blocked nothing the page needs
    return page


@pytest.fixture
def page(browser: Browser, keyed: Server) -> Iterator[Page]:
    opened = open_page(browser, keyed)
    yield opened
    opened.context.close()


def set_field(page: Page, selector: str, value: str) -> None:
    """Type ``value`` into a field and leave it, as a person does (the page saves on change)."""
    page.fill(selector, value)
    page.dispatch_event(selector, "change")


def sign_in(page: Page, key: str = KEY) -> None:
    set_field(page, "#api-key", key)
    if key == KEY:
        page.wait_for_selector("#server:has-text('worker')")  # the model list came with the key


def ask(page: Page, question: str, answers: int) -> dict[str, str]:
    """Ask with the keyboard (Enter sends); wait for answer number ``answers`` to end; return its attributes."""
    page.fill("#question", question)
    page.press("#question", "Enter")
    answer = page.locator("li.assistant[data-state]").nth(answers - 1)
    answer.wait_for()
    attributes: dict[str, str] = answer.evaluate(
        "node => ({...node.dataset, ...Object.fromEntries(Object.entries(node.querySelector('.stats').dataset)),"
        " text: node.querySelector('.content').innerText, stats: node.querySelector('.stats').innerText})"
    )
    return attributes


def test_a_document_then_two_questions_the_second_from_the_cache(page: Page, keyed: Server) -> None:
    sign_in(page)
    set_field(page, "#temperature", "0")
    set_field(page, "#max-tokens", "40")
    sent: list[dict[str, Any]] = []

    def record(request: Request) -> None:
        if request.url.endswith("/v1/chat/completions"):
            sent.append(json.loads(request.post_data or "{}"))

    page.on("request", record)

    # Hold the warm request until the page has shown that it is reading.
    held: list[Route] = []
    page.route("**/v1/cache/warm", lambda route: held.append(route))
    page.fill("#document-text", DOCUMENT)
    page.click("#read-document")
    page.wait_for_selector("#document-progress:not([hidden])")
    assert page.inner_text("#document-status").startswith("Reading about")
    # Playwright calls the route handler while it waits, so wait with its clock.
    wait_for(lambda: held or page.wait_for_timeout(20), PATIENCE_S, what="the page to send /v1/cache/warm")
    held[0].continue_()
    page.wait_for_selector("#document-status[data-state=cached]")
    assert page.inner_text("#document-status").startswith("In the cache:")
    assert page.get_attribute("#document-progress", "hidden") is not None

    page.evaluate(LAYOUT_SHIFTS)
    first = ask(page, "How fast do forklifts go in aisle 3?", 1)
    second = ask(page, "When does the night shift check aisle 5?", 2)
    # Nothing on the page moved while the answers streamed in (the Layout Instability API).
    assert page.evaluate("() => window.__shifts") == []
    for answer in (first, second):
        assert answer["state"] == "done" and answer["text"].strip()
        assert int(answer["chunks"]) > 1  # it came in piece by piece, as streamed
        assert int(answer["ttftMs"]) >= 0 and int(answer["promptTokens"]) > 0
        assert "first token" in answer["stats"] and "tokens/s" in answer["stats"]
        assert "saved by compression" in answer["stats"]
    assert int(second["cachedTokens"]) > 0
    assert f"{int(second['cachedTokens']):,} of" in second["stats"]

    # The document went first, as the system message, and the first turn came along with the second question.
    assert [m["role"] for m in sent[0]["messages"]] == ["system", "user"]
    assert sent[0]["messages"][0]["content"].endswith(DOCUMENT)
    assert [m["role"] for m in sent[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert sent[1]["stream"] is True and sent[1]["stream_options"] == {"include_usage": True}
    assert sent[1]["temperature"] == 0 and sent[1]["max_tokens"] == 40

    # The conversation is kept in the browser, listed under its first question.
    stored = page.evaluate("() => JSON.parse(localStorage.getItem('reame.conversations.v1'))")
    (conversation,) = stored["conversations"]
    assert [m["role"] for m in conversation["messages"]] == ["user", "assistant", "user", "assistant"]
    assert page.inner_text("#conversations .open[aria-current=true]") == "How fast do forklifts go in aisle 3?"

    screenshots = os.environ.get("REAME_WEB_SCREENSHOTS")
    if screenshots:
        Path(screenshots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(screenshots) / "web-desktop.png"))
        page.set_viewport_size(PHONE)
        page.wait_for_selector("#sidebar", state="hidden")  # slid away
        page.click("#document summary")  # fold the document away, as one would on a phone
        page.screenshot(path=str(Path(screenshots) / "web-phone.png"))


def test_markup_in_a_reply_shows_as_text_and_never_runs(browser: Browser, keyed: Server) -> None:
    # Without the page's Content-Security-Policy, so that only the rendering keeps the markup inert.
    page = open_page(browser, keyed, bypass_csp=True)
    try:
        sign_in(page)
        chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in CRAFTED_REPLY]
        body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        page.route("**/v1/chat/completions", lambda route: route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body=body
        ))
        answer = ask(page, "Say something dangerous.", 1)
        assert answer["state"] == "done"
        assert ATTACK in answer["text"] and SCRIPT in answer["text"]
        content = page.locator("li.assistant .content")
        assert content.locator("img, script").count() == 0
        assert content.locator("strong").inner_text() == "bold"
        assert content.locator("a").count() == 0  # a javascript: link stays text
        page.evaluate("() => new Promise(done => setTimeout(done, 0))")  # let any queued handler run
        assert page.evaluate("() => window.__pwned") is None
    finally:
        page.context.close()


HOSTILE = [
    ATTACK, SCRIPT, "<svg onload=window.__pwned=4>", "[x](javascript:window.__pwned=5)", "[x]( JAVASCRIPT:alert(1) )",
    "`<img src=x onerror=window.__pwned=6>`", "```html\n<iframe srcdoc='<script>parent.__pwned=7</script>'>\n```",
    "> <b onmouseover=window.__pwned=8>quote</b>", "| <img src=x onerror=window.__pwned=9> | b |\n|---|---|\n| c | d |",
    "**<a href=javascript:window.__pwned=10>bold</a>**", "- <style>body{display:none}</style>\n- item",
    "https://example.com/\"onmouseover=\"window.__pwned=11", "&lt;img src=x onerror=window.__pwned=12&gt;",
]
ALLOWED_TAGS = {"DIV", "P", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "PRE", "CODE", "STRONG", "EM", "DEL", "A",
                "BLOCKQUOTE", "HR", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD"}


def test_the_markdown_renderer_builds_only_inert_nodes(browser: Browser, keyed: Server) -> None:
    # The page's own renderer, on replies meant to break out; CSP off, so only the renderer protects.
    page = open_page(browser, keyed, bypass_csp=True)
    try:
        found = page.evaluate(
            """async (texts) => {
                const { renderMarkdown } = await import("/static/markdown.js");
                const box = document.createElement("div");
                document.body.append(box);
                const seen = [];
                for (const text of texts) {
                    renderMarkdown(text, box);
                    for (const node of box.querySelectorAll("*")) {
                        seen.push({ tag: node.tagName, attributes: [...node.attributes].map(a => [a.name, a.value]) });
                    }
                }
                await new Promise(done => setTimeout(done, 50));
                return { seen, pwned: window.__pwned ?? null };
            }""",
            HOSTILE,
        )
        assert found["pwned"] is None
        for node in found["seen"]:
            assert node["tag"] in ALLOWED_TAGS, node
            for name, value in node["attributes"]:
                assert name in {"href", "rel", "target", "class", "start", "data-lang"}, node
                if name == "href":
                    assert value.startswith(("http://", "https://", "mailto:")), value
        rendered = page.evaluate(
            """async (text) => {
                const { renderMarkdown } = await import("/static/markdown.js");
                const box = document.createElement("div");
                renderMarkdown(text, box);
                return [...box.children].map(n => n.tagName + ":" + n.textContent);
            }""",
            "## Title\n\nSome *em* and `code`.\n\n1. one\n2. two\n\n```\nx < y\n```",
        )
        assert rendered == ["H4:Title", "P:Some em and code.", "OL:onetwo", "PRE:x < y"]
    finally:
        page.context.close()


def test_stop_ends_a_long_generation(page: Page, keyed: Server) -> None:
    sign_in(page)
    set_field(page, "#max-tokens", "3000")

    def endless(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        body["logit_bias"] = {str(token): -100 for token in END_TOKENS}
        route.continue_(post_data=json.dumps(body))

    page.route("**/v1/chat/completions", endless)
    page.fill("#question", "Count from one to one thousand in words.")
    page.press("#question", "Enter")
    page.wait_for_selector("li.assistant.streaming[data-chunks]")  # tokens are coming in
    assert page.is_disabled("#send") and page.is_enabled("#stop")
    page.click("#stop")
    answer = page.locator("li.assistant[data-state=stopped]")
    answer.wait_for()
    assert "stopped" in answer.locator(".stats").inner_text()
    assert answer.locator(".content").inner_text().strip()
    assert page.is_enabled("#send") and page.is_disabled("#stop")
    # The server saw the client go and stopped decoding.
    wait_for(lambda: (keyed.ready() or {}).get("running") == 0, PATIENCE_S, what="the worker to stop decoding")
    wait_for(lambda: "POST /v1/chat/completions 499" in keyed.log(), PATIENCE_S, what="the cancellation's log line")


def reply_with(page: Page, status: int, body: str, headers: dict[str, str] | None = None) -> None:
    """Answer the page's chat requests with a canned response (no model involved)."""
    page.route("**/v1/chat/completions", lambda route: route.fulfill(status=status, headers=headers, body=body))


def sse(*pieces: str) -> str:
    chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in pieces]
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


def test_conversations_are_kept_renamed_exported_and_deleted(page: Page) -> None:
    sign_in(page)
    reply_with(page, 200, sse("Pallets ", "go ", "four high."), {"Content-Type": "text/event-stream"})
    page.fill("#document-text", "Pallets are stacked four high.")
    ask(page, "How high are pallets stacked?", 1)
    title = "How high are pallets stacked?"
    assert page.inner_text("#conversations .open") == title

    page.click(f"button[aria-label='Rename “{title}”']")
    page.keyboard.press("Control+A")
    page.keyboard.type("Pallets")
    page.keyboard.press("Enter")
    page.wait_for_selector("#conversations .open:text-is('Pallets')")
    assert page.evaluate("() => document.activeElement.textContent") == "Pallets"  # focus stays on it

    with page.expect_download() as download:
        page.click("button[aria-label='Export “Pallets” as JSON']")
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported["title"] == "Pallets" and exported["document"]["text"] == "Pallets are stacked four high."
    assert [m["content"] for m in exported["messages"]] == [title, "Pallets go four high."]

    page.click("#new-conversation")
    assert page.locator("#conversations li").count() == 2
    assert page.inner_text("#conversations .open[aria-current=true]") == "New conversation"
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[aria-label='Delete “Pallets”']")
    page.wait_for_selector("#conversations .open:text-is('Pallets')", state="detached")

    page.reload()  # all of it lives in the browser
    page.wait_for_selector("body[data-ready=true]")
    assert page.locator("#conversations li").count() == 1
    assert page.input_value("#api-key") == KEY


def test_a_file_opened_or_dropped_becomes_the_document(page: Page) -> None:
    sign_in(page)
    notes = "# Notes\n\nThe loading dock opens at 06:00 and closes at 22:00.\n"
    page.set_input_files("#file", files=[{"name": "notes.md", "mimeType": "text/markdown", "buffer": notes.encode()}])
    page.wait_for_selector("#document-status[data-state=cached]")  # read at once (too short to store, held in memory)
    assert page.input_value("#document-text") == notes
    assert page.inner_text("#document-summary").startswith("notes.md")
    assert page.inner_text("#conversations .open[aria-current=true]") == "notes.md"

    page.click("#new-conversation")
    page.evaluate("""(text) => {
        const data = new DataTransfer();
        data.items.add(new File([text], "dropped.txt", { type: "text/plain" }));
        document.getElementById("drop").dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true }));
    }""", "Dropped text about forklifts.")
    page.wait_for_selector("#document-status[data-state=cached]")
    assert page.input_value("#document-text") == "Dropped text about forklifts."
    assert page.inner_text("#conversations .open[aria-current=true]") == "dropped.txt"


def test_the_keyboard_reaches_the_question_and_sends_it(page: Page) -> None:
    sign_in(page)
    reply_with(page, 200, sse("Yes."), {"Content-Type": "text/event-stream"})
    page.reload()  # the key stays in localStorage; focus starts at the top of the page
    page.wait_for_selector("body[data-ready=true]")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip"  # the first stop: skip to the question
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "question"
    page.keyboard.type("Is it?")
    page.keyboard.press("Shift+Enter")  # a new line, not sent
    page.keyboard.type("Really?")
    assert page.input_value("#question") == "Is it?\nReally?" and page.locator("li.message").count() == 0
    page.keyboard.press("Enter")
    page.wait_for_selector("li.assistant[data-state=done]")
    assert page.inner_text("li.user .content") == "Is it?\nReally?"
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "send"


def test_busy_and_unavailable_say_when_to_retry(page: Page) -> None:
    sign_in(page)
    for number, (status, code) in enumerate([(429, "queue_full"), (503, "no_workers")], start=1):
        error = {"error": {"message": f"the server says {code}", "type": "x", "param": None, "code": code}}
        page.unroute("**/v1/chat/completions")
        reply_with(page, status, json.dumps(error), {"Content-Type": "application/json", "Retry-After": "7"})
        answer = ask(page, f"Question {number}?", number)
        assert answer["state"] == "error"
        assert answer["text"].startswith(str(status)) and f"the server says {code}" in answer["text"]
        assert "Retry after 7 s." in answer["text"]


def test_a_wrong_key_shows_the_401_message(page: Page) -> None:
    # No key yet: the model list says what is wrong.
    page.wait_for_selector("#server.error:has-text('401')")
    assert "API key" in page.inner_text("#server")
    sign_in(page, "wrong-key")
    answer = ask(page, "Hello?", 1)
    assert answer["state"] == "error"
    assert answer["text"].startswith("401") and "Incorrect API key provided" in answer["text"]
    assert page.locator("li.assistant [role=alert]").count() == 1


def test_a_phone_sized_screen_has_one_column_and_a_menu(browser: Browser, keyed: Server) -> None:
    page = open_page(browser, keyed, viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        # Nothing sticks out on the right (a phone would zoom the whole page out to show it).
        right = page.evaluate("() => Math.max(...[...document.querySelectorAll('body *')].map("
                              "node => node.getBoundingClientRect().right))")
        assert right <= PHONE["width"]
        assert page.is_hidden("#sidebar") and page.is_visible("#question") and page.is_visible("#send")
        page.click("#menu")
        page.wait_for_selector("#sidebar", state="visible")
        assert page.evaluate("() => document.activeElement.id") == "close-menu"
        page.keyboard.press("Escape")
        page.wait_for_selector("#sidebar", state="hidden")
        assert page.evaluate("() => document.activeElement.id") == "menu"
    finally:
        page.context.close()
