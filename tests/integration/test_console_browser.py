"""The operator console in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``,
driven by Selenium), against the real ``ocm-gateway serve`` in front of a real llama.cpp
(scripted model) and an endless loopback upstream (a run that lasts until cancelled):

log in (a wrong admin key is refused), create a key, use it through the OpenAI SDK, see the
usage appear, see a live run and cancel it from the page (the client's stream ends, the
upstream connection closes), revoke the key and see the next request refused.  Screenshots at
a laptop and a phone viewport are saved to ``.cache/console/`` (docs/console.png is one of them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.conftest import run_gateway
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(240)
ADMIN = "console-admin-secret"
SHOTS = ROOT / ".cache" / "console"


def _driver() -> WebDriver:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    assert os.path.exists(chromium) and os.path.exists(driver_path), \
        "install Debian's chromium and chromium-driver (.ci/run does)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,860", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    driver = _driver()
    try:
        yield driver
    finally:
        driver.quit()


def _config(tmp: Path, fast: str, slow: str) -> Path:
    digest = hashlib.sha256(ADMIN.encode()).hexdigest()
    text = f"""
[store]
path = "{tmp / 'store.sqlite3'}"
[admin]
key_sha256 = "{digest}"
[auth]
key_cache_seconds = 1
[usage]
flush_seconds = 0.5
[models."scripted-final"]
backend = "llamacpp"
base_urls = ["{fast}"]
context_window = 4096
[models."scripted-final".harmony]
current_date = "2026-11-22"
[models."endless"]
backend = "llamacpp"
base_urls = ["{slow}"]
context_window = 4096
"""
    path = tmp / "gateway.toml"
    path.write_text(text)
    return path


def _row_cells(driver: WebDriver, column: int, text: str) -> list[str]:
    """The cells of the usage table's row whose ``column`` reads ``text``, read in one script
    (the page redraws the table every 2 s: elements found one call earlier go stale)."""
    cells: list[str] = driver.execute_script("""
        const [column, text] = arguments;
        const row = [...document.querySelectorAll("#usage-table tr")].find(
            (tr) => tr.cells[column] && tr.cells[column].textContent === text);
        return row ? [...row.cells].map((td) => td.textContent) : [];""", column, text)
    return cells


def _tab(driver: WebDriver, name: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'#tabs button[data-tab="{name}"]').click()


def _click(driver: WebDriver, css: str) -> None:
    """Click ``css`` in a list the page redraws every 2 s: an element found just before a
    redraw is stale by the click, so it is found again (as a user clicks what is on screen)."""
    def clicked(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    WebDriverWait(driver, 10, ignored_exceptions=(StaleElementReferenceException,)).until(clicked)


def test_console_end_to_end(browser: WebDriver, llama_final: str, tmp_path: Path) -> None:
    endless = LoopbackUpstream(interval=0.05)
    wait = WebDriverWait(browser, 20)
    with endless.running() as slow, run_gateway(_config(tmp_path, llama_final, slow)) as gw:
        browser.get(f"{gw.url}/console")
        # a wrong admin key: refused on the page
        browser.find_element(By.ID, "admin-key").send_keys("wrong")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "login-error"), "admin key"))
        browser.find_element(By.ID, "admin-key").send_keys(ADMIN)
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "models"), "scripted-final"))
        assert "harmony" in browser.find_element(By.ID, "models").text
        assert ADMIN not in browser.page_source

        # create a key on the page; its secret is shown once
        _tab(browser, "keys")
        form = browser.find_element(By.ID, "key-form")
        form.find_element(By.NAME, "name").send_keys("team-search")
        form.find_element(By.NAME, "owner").send_keys("search")
        form.find_element(By.NAME, "requests_per_minute").send_keys("100")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(ec.visibility_of_element_located((By.ID, "secret-value")))
        secret = browser.find_element(By.ID, "secret-value").text
        assert secret.startswith("ocm-")
        wait.until(ec.text_to_be_present_in_element((By.ID, "key-list"), "team-search"))

        # use it through the OpenAI SDK
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=secret, max_retries=0)
        answer = client.chat.completions.create(model="scripted-final",
                                                messages=[{"role": "user", "content": "Hello"}])
        assert answer.choices[0].message.content and answer.usage is not None

        # the usage appears
        _tab(browser, "usage")
        wait.until(ec.text_to_be_present_in_element((By.ID, "usage-table"), "team-search"))
        cells = _row_cells(browser, 1, "scripted-final")  # in one script: the table redraws every 2 s
        assert cells[2] == "1" and cells[3] == f"{answer.usage.prompt_tokens:,}", cells
        # a fresh gateway's first hour is a bar of the axis' 12 hours, not a hairline at the right
        # edge of a 7-day axis (600 / 12 * 0.8 = 40 units wide); read in one script: the page
        # redraws the chart every 2 s
        widths = browser.execute_script('return [...document.querySelectorAll("#chart svg rect")]'
                                        '.map((r) => Number(r.getAttribute("width")));')
        assert len(widths) == 1 and widths[0] >= 30, widths
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "console-usage.png"))

        # a live run appears on the page and is cancelled from it
        ended = threading.Event()
        events: list[str] = []

        def stream() -> None:
            with client.responses.stream(model="endless", input="Go on forever") as s:
                for event in s:
                    events.append(event.type)
            ended.set()

        thread = threading.Thread(target=stream, daemon=True)
        thread.start()
        _tab(browser, "overview")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#runs button[data-cancel]")))
        assert "team-search" in browser.find_element(By.ID, "runs").text
        time.sleep(0.5)
        browser.save_screenshot(str(SHOTS / "console-laptop.png"))
        _click(browser, "#runs button[data-cancel]")
        assert ended.wait(10), "the client's stream did not end after the cancel"
        assert events and events[-1] in ("response.cancelled", "response.incomplete", "response.failed",
                                         "response.completed"), events[-3:]
        deadline = time.monotonic() + 5
        while not endless.closed_at and time.monotonic() < deadline:
            time.sleep(0.05)
        assert endless.closed_at, "the upstream request was not cancelled"
        wait.until(ec.text_to_be_present_in_element((By.ID, "runs"), "Nothing running"))

        # the phone viewport: still readable (no horizontal scroll of the page)
        browser.set_window_size(390, 844)
        _tab(browser, "keys")
        wait.until(ec.text_to_be_present_in_element((By.ID, "key-list"), "team-search"))
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400, f"the page scrolls sideways on a phone ({width}px)"
        browser.save_screenshot(str(SHOTS / "console-phone.png"))
        browser.set_window_size(1280, 860)

        # revoke it on the page: the next request is refused
        _click(browser, "#key-list button[data-revoke]")
        wait.until(ec.text_to_be_present_in_element((By.ID, "key-list"), "revoked"))
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="scripted-final",
                                           messages=[{"role": "user", "content": "Hello"}])
        _tab(browser, "errors")
        wait.until(ec.text_to_be_present_in_element((By.ID, "error-list"), "invalid_api_key"))
        assert secret not in browser.page_source


def _seed_busy_usage(path: Path, now: float) -> dict[str, int]:
    """Three days of hourly usage by nine keys of very different volume, written into the store
    file before the gateway opens it (what a busy gateway's store holds); the tokens per key."""
    import asyncio

    import aiosqlite

    from app.stores.accounts import UsageRow, bucket_start
    from app.stores.sqlite_accounts import SqliteAccountStore
    from app.stores.sqlite_db import configure

    volume = {f"team-{i}": (10 - i) * 1000 for i in range(9)}  # team-0 largest ... team-8 smallest

    async def seed() -> None:
        db = await aiosqlite.connect(str(path))
        await configure(db)
        store = await SqliteAccountStore.open(db)
        rows: dict[tuple[object, ...], UsageRow] = {}  # one row per identity, as the recorder flushes
        for hours_ago in range(0, 72, 6):
            for name, tokens in volume.items():
                for grain in ("hour", "day"):
                    sample = UsageRow(grain, bucket_start(now - hours_ago * 3600, grain), name,
                                      "scripted-final", requests=1, input_tokens=tokens // 2,
                                      output_tokens=tokens // 2)
                    sample.observe_latency(0.6)
                    rows.setdefault(sample.ident, sample.blank()).add(sample)
        await store.add_usage(list(rows.values()))
        await db.close()

    asyncio.run(seed())
    return {name: tokens * 12 for name, tokens in volume.items()}


def test_console_on_a_busy_gateway(browser: WebDriver, tmp_path: Path) -> None:
    """Nine keys over three days: the axis spans the data, the five largest keys by volume get a
    colour each and the other four one "others" stack, latency percentiles are interpolated from
    the histogram (requests of ~600 ms read 750 / 975, not the bucket limits 1,000 / 2,500); at a
    laptop's and a phone's width (screenshots in .cache/console/)."""
    totals = _seed_busy_usage(tmp_path / "store.sqlite3", time.time())
    wait = WebDriverWait(browser, 20)
    with run_gateway(_config(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9")) as gw:
        browser.get(f"{gw.url}/console")
        browser.find_element(By.ID, "admin-key").send_keys(ADMIN)
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "models"), "scripted-final"))
        _tab(browser, "usage")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#chart [data-legend]")))
        # read the chart in one script: the page redraws it every 2 s
        chart = browser.execute_script("""
            const c = document.getElementById("chart");
            return {legend: [...c.querySelectorAll("[data-legend]")].map((e) => e.dataset.legend),
                    text: c.innerText,
                    bars: [...c.querySelectorAll("svg rect")].map((r) => [Number(r.getAttribute("x")),
                                                                          r.dataset.series])};""")
        ranked = sorted(totals, key=lambda name: -totals[name])
        assert chart["legend"] == [*ranked[:5], "4 others"], chart["legend"]
        assert f"{totals['team-0']:,}" in chart["text"]
        xs = sorted(x for x, _ in chart["bars"])
        assert len({round(x) for x in xs}) == 12, "one stack per 6 hours of data"
        assert xs[0] < 30 and xs[-1] > 550, "the axis starts at the first data and ends now"
        assert sum(1 for _, series in chart["bars"] if series == "4 others") == 12
        cells = _row_cells(browser, 0, "team-0")
        assert cells[2] == "12" and cells[3] == f"{totals['team-0'] // 2:,}", cells  # the same data
        assert cells[9] == "750 / 975", cells
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "console-busy-laptop.png"))
        browser.set_window_size(390, 844)
        time.sleep(0.3)
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400, f"the page scrolls sideways on a phone ({width}px)"
        browser.save_screenshot(str(SHOTS / "console-busy-phone.png"))
