"""The web page in real headless Chromium (Debian's chromium and chromium-driver, through
Selenium): an ask streamed into an answer, its attempt timeline and its sources; "wrong" stored
as a label; the memory page; and document text holding <script> shown as text, never run.

With SIRAG_SCREENSHOTS=DIR the pages are saved there as serve-ask.png and serve-memory.png
(docs/ holds the ones the README shows)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.serve.conftest import GOOD, QUESTION, REFUSE

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)
CHROMEDRIVER = shutil.which("chromedriver")
HOSTILE = ("# The Harbour Notice\n\nThe harbour notice says the ferry to Gull Island leaves at noon "
           "<script>window.__pwned = 1</script> from pier nine, <img src=x onerror=\"window.__pwned = 2\"> "
           "every Sunday in summer.\n")


#: Asks made before the one in the browser: (question, scripted replies, label).
EARLIER = [
    ("Who built the lighthouse of Marrow Point?", ["The engineer Clara Venn built it in 1852 [1]."], True),
    ("When does the fish market open?", ["Every Thursday at dawn, on the north quay [1]."], True),
    ("How many apple trees grow in the orchard behind the mill?", ["Sixty apple trees [1]."], True),
    ("What colour was the harbour master's umbrella?", [REFUSE], True),
    ("Who planted the Grandmother tree?", [REFUSE, "Ansel Brook planted it in 1790 [1]."], True),
    ("What did the council pay for in 1901?", ["A new harbour office and a bell from Bristol [1]."], False),
]


@pytest.fixture
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_or_fail("selenium is not installed (pip install -e '.[test]')")
    if CHROMIUM is None or CHROMEDRIVER is None:
        skip_or_fail("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for a browser online
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,1000", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def _screenshot(driver, name: str) -> None:
    """The whole page, as Chromium renders it (not only the window), when SIRAG_SCREENSHOTS says where."""
    where = os.environ.get("SIRAG_SCREENSHOTS")
    if not where:
        return
    import base64

    driver.execute_script("window.scrollTo(0, 0)")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    Path(where).mkdir(parents=True, exist_ok=True)
    (Path(where) / name).write_bytes(base64.b64decode(shot["data"]))


def _visible(driver, element_id: str) -> bool:
    return driver.find_element("id", element_id).is_displayed()


def test_ask_stream_timeline_sources_feedback_and_the_memory_page(serve, browser):
    s = serve([GOOD])
    # Outcomes first, labelled, so that the memory page has something to chart.
    for question, replies, right in EARLIER:
        s.gen.replies, s.gen._i = replies, 0
        oid = s.client.post("/v1/ask", json={"question": question}).json()["outcome_id"]
        s.client.post("/v1/feedback", json={"outcome_id": oid, "correct": right})
    s.gen.replies, s.gen._i = [REFUSE, GOOD], 0
    browser.get(s.url + "/")
    _wait(browser, lambda d: d.find_element("id", "ready").text == "ready")
    browser.find_element("id", "question").send_keys(QUESTION)
    browser.find_element("id", "ask").click()
    _wait(browser, lambda d: _visible(d, "answer-box"))

    assert browser.find_element("id", "answer").text == GOOD
    assert "attempt 2 of 2" in browser.find_element("id", "answer-meta").text
    cards = browser.find_elements("css selector", "#timeline li.attempt")
    assert [c.get_attribute("class").split()[-1] for c in cards] == ["failed", "passed"]
    assert len(cards[0].find_elements("css selector", ".signal")) == 5
    assert REFUSE in cards[0].find_element("css selector", ".stream").text
    assert "repair:" in cards[1].find_element("css selector", ".repair").text
    assert "NONE" in cards[1].find_element("css selector", ".diagnosis").text
    cite = browser.find_element("css selector", "#answer a.cite")
    assert cite.get_attribute("href").endswith("#source-1")
    mark = browser.find_element("css selector", "#source-1 mark")
    assert "Tobias Lune rowed out alone and saved eleven sailors" in mark.text
    _screenshot(browser, "serve-ask.png")

    browser.find_element("id", "mark-wrong").click()
    _wait(browser, lambda d: "recorded: wrong" in d.find_element("id", "feedback-status").text)
    outcome = s.store.recent(limit=1)["outcomes"][0]
    assert outcome["question"] == QUESTION and outcome["label"] == 0
    assert s.store.show(outcome["id"])["current_label"]["source"] == "user"

    browser.get(s.url + "/memory")
    _wait(browser, lambda d: d.find_elements("css selector", "#outcomes tbody tr"))
    assert browser.find_element("css selector", "#summary .card .big").text == str(len(EARLIER) + 1)
    rows = browser.find_elements("css selector", "#outcomes tbody tr")
    assert QUESTION in rows[0].text and rows[0].text.endswith("wrong") and rows[2].text.endswith("right")
    assert browser.find_elements("css selector", "#reliability svg circle")
    assert browser.find_elements("css selector", "#by-class tbody tr")
    assert "MISSED_ANSWER" in browser.find_element("id", "failures").text
    browser.find_element("id", "search").send_keys("lighthouse")
    browser.find_element("css selector", "#search-form button").click()
    _wait(browser, lambda d: len(d.find_elements("css selector", "#outcomes tbody tr")) == 1)
    assert "right" in browser.find_element("css selector", "#outcomes tbody tr").text
    _screenshot(browser, "serve-memory.png")


def test_document_text_holding_script_is_shown_as_text_and_never_runs(serve, browser, fake_config, corpus_dir,
                                                                      hash_embedder, built_index):
    from self_improving_rag.ingestion.pipeline import ingest

    (corpus_dir / "notice.md").write_text(HOSTILE, encoding="utf-8")
    ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    s = serve(["<b>Noon</b> <script>window.__pwned = 3</script> from pier nine [1]."])
    browser.get(s.url + "/")
    browser.find_element("id", "question").send_keys("When does the ferry to Gull Island leave pier nine?")
    browser.find_element("id", "ask").click()
    _wait(browser, lambda d: d.find_elements("css selector", "#sources li.source"))
    sources = browser.find_element("id", "sources")
    assert "<script>window.__pwned = 1</script>" in sources.text and 'onerror="window.__pwned = 2"' in sources.text
    assert sources.find_elements("css selector", "script, img") == []
    stream = browser.find_element("css selector", "#timeline .stream").text
    assert "<script>window.__pwned = 3</script>" in stream
    assert browser.find_elements("css selector", "#timeline script, #answer script, #timeline b, #answer b") == []
    assert browser.execute_script("return window.__pwned === undefined")
    assert [e for e in browser.get_log("browser") if "pwned" in e.get("message", "")] == []


def test_the_pages_scripts_never_parse_text_as_html():
    static = Path(__file__).resolve().parents[2] / "self_improving_rag" / "serve" / "static"
    for js in static.glob("*.js"):
        text = js.read_text(encoding="utf-8")
        for sink in (r"innerHTML", r"outerHTML", r"insertAdjacentHTML", r"document\.write", r"\beval\(",
                     r"\bnew Function\b", r"\.html\("):
            assert not re.search(sink, text), f"{js.name} uses {sink}"
