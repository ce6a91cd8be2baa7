"""Opens the built documentation site in headless Chromium through Selenium and prints, as one JSON object,
what a reader sees: the home page, a generated reference page reached through the navigation, a rendered
diagram, a search's results, and whether code blocks fit their column; then the same search on the site opened
from disk. Run by tests/docs/test_site_browser.py with .venv-docs's Python (Selenium lives there, not in .venv):

    .venv-docs/bin/python tests/support/browser_check.py http://127.0.0.1:PORT/ file:///path/to/site/index.html

Debian's chromium and chromedriver (`make browser`), started as this machine's network needs: no background
networking, no component updates, a fresh profile.
"""

from __future__ import annotations

import json
import sys
import tempfile

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 30


def driver(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # given, with the driver's path: Selenium Manager downloads nothing
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    browser.set_page_load_timeout(WAIT_S)
    return browser


def visible_texts(browser: webdriver.Chrome, selector: str) -> list[str]:
    return [e.text.strip() for e in browser.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()]


def page_state(browser: webdriver.Chrome) -> dict:
    sidebar = browser.find_element(By.CSS_SELECTOR, ".md-sidebar--primary")
    return {
        "url": browser.current_url,
        "title": browser.title,
        "h1": browser.find_element(By.CSS_SELECTOR, "article h1").text,
        "header": browser.find_element(By.CSS_SELECTOR, "header.md-header").is_displayed(),
        "sidebar_width": sidebar.size["width"] if sidebar.is_displayed() else 0,
        "nav": visible_texts(browser, "nav.md-nav--primary .md-nav__link"),
        "nav_active": visible_texts(browser, "nav.md-nav--primary .md-nav__link--active"),
        "toc": visible_texts(browser, "nav.md-nav--secondary .md-nav__link"),
        "code_blocks": len(browser.find_elements(By.CSS_SELECTOR, "article .highlight")),
        # Code blocks wider than their column (a scroll bar hiding the end of a line, comments included).
        "code_overflowing": browser.execute_script(
            "return [...document.querySelectorAll('article pre > code')]"
            ".filter(c => c.scrollWidth > c.clientWidth + 1).length"
        ),
    }


def search(browser: webdriver.Chrome, page: str, query: str) -> dict:
    """Types `query` into the header's search box, as a reader does, and waits for the results (or not)."""
    browser.get(page)
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys(query)

    def meta(b: webdriver.Chrome) -> str:
        return b.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text.strip()

    try:
        WebDriverWait(browser, WAIT_S).until(lambda b: "matching" in meta(b))
    except TimeoutException:
        pass  # reported as it stands: "Initializing search" when the search never started
    return {
        "meta": meta(browser),
        "results": visible_texts(browser, ".md-search-result__item .md-search-result__article h1"),
    }


def rendered_diagram(browser: webdriver.Chrome) -> dict:
    """The first mermaid diagram as drawn: its SVG's node count and text, read through its shadow root."""
    document = browser.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
    host = next(
        n
        for n in _nodes(document)
        if n.get("nodeName") == "DIV"
        and "mermaid"
        in dict(zip(n.get("attributes", [])[::2], n.get("attributes", [])[1::2], strict=True)).get("class", "")
    )
    inside = [n for root in host.get("shadowRoots", []) for n in _nodes(root)]
    classes = [
        dict(zip(n.get("attributes", [])[::2], n.get("attributes", [])[1::2], strict=True)).get("class", "")
        for n in inside
    ]
    return {
        "svg": any(n.get("nodeName") == "svg" for n in inside),
        "nodes": sum(1 for c in classes if "node" in c.split()),
        "text": " ".join(n["nodeValue"].strip() for n in inside if n.get("nodeType") == 3 and n["nodeValue"].strip()),
        "height": browser.find_element(By.CSS_SELECTOR, "div.mermaid").size["height"],
        "label_px": _label_px(browser, next(n for n in inside if n.get("nodeName") == "svg")),
    }


def _label_px(browser: webdriver.Chrome, svg: dict) -> float:
    """The size a label's text is drawn at: mermaid's font size (16 px in its own units) times the scale the
    page draws the diagram at (its width on screen over its viewBox's)."""
    attributes = dict(zip(svg.get("attributes", [])[::2], svg.get("attributes", [])[1::2], strict=True))
    natural_width = float(attributes["viewBox"].split()[2])
    quad = browser.execute_cdp_cmd("DOM.getBoxModel", {"nodeId": svg["nodeId"]})["model"]["content"]
    return round(16 * (quad[2] - quad[0]) / natural_width, 1)


def _nodes(node: dict):
    yield node
    for child in node.get("children", []) + node.get("shadowRoots", []):
        yield from _nodes(child)


def main(base: str, from_disk: str) -> dict:
    with tempfile.TemporaryDirectory() as profile:
        browser = driver(profile)
        try:
            browser.get(base)
            home = page_state(browser)
            # The reader's path to the reference: the navigation's "Model file" link, clicked.
            link = browser.find_element(
                By.XPATH, "//nav[contains(@class,'md-nav--primary')]//a[normalize-space()='Model file']"
            )
            link.click()
            WebDriverWait(browser, WAIT_S).until(expected_conditions.url_contains("reference/model-file"))
            reference = page_state(browser)
            browser.get(base + "explanation/architecture.html")
            # Material renders a ```mermaid block into a closed shadow root that replaces the <pre> holding its
            # source; the page's scripts cannot see inside, the DevTools protocol can (pierce).
            WebDriverWait(browser, WAIT_S).until(
                lambda b: (
                    not b.find_elements(By.CSS_SELECTOR, "pre.mermaid")
                    and b.find_elements(By.CSS_SELECTOR, "div.mermaid")
                )
            )
            diagram = rendered_diagram(browser)
            browser.get(base + "how-to/retire-a-model.html")
            wide_code = page_state(browser)
            return {
                "home": home,
                "reference": reference,
                "diagram": diagram,
                "wide_code": wide_code,
                "search": search(browser, base, "rollback"),
                "search_from_disk": search(browser, from_disk, "rollback"),
            }
        finally:
            browser.quit()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
