"""The built documentation site (``nox -s docs``: ``mkdocs build --strict`` into site/), opened in
a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``): the API page of every
Estimator renders its class with the methods users call, rendered from the docstrings, and the
user guide's pages link to each other on the site."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

SITE = Path(os.environ.get("ORCA_DOCS_SITE", Path(__file__).resolve().parents[2] / "site")).resolve()

#: page -> [(a class's id, the methods that must be documented on it), ...]
API = {
    "torch": [("orca.torch.estimator.Estimator", ["from_torch", "fit", "evaluate", "predict", "save", "load"])],
    "tf": [("orca.tf.estimator.Estimator", ["from_keras", "fit", "evaluate", "predict", "save", "load"]),
           ("orca.tf.graph_estimator.GraphEstimator", ["fit", "evaluate", "save", "load", "export_saved_model"])],
    "mxnet": [("orca.mxnet.estimator.Estimator", ["from_mxnet", "fit", "evaluate", "predict", "save", "load"])],
    "bigdl": [("orca.bigdl.estimator.Estimator", ["from_bigdl", "fit", "evaluate", "predict", "save", "load"])],
    "openvino": [("orca.openvino.estimator.Estimator", ["from_openvino", "predict"])],
    "core": [("orca.core.engine.estimator.BaseEstimator", ["fit", "evaluate", "predict", "save_checkpoint",
                                                           "set_tensorboard", "set_mlflow"]),
             ("orca.core.engine.tracking.MLflowLogger", []),
             ("orca.core.tune.orca_trainable", [])],
}


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"none of {names} is installed: apt-get install chromium chromium-driver (`nox -s docs` does, as root)")


@pytest.fixture(scope="module")
def browser():
    if not (SITE / "index.html").exists():
        raise RuntimeError(f"no built site at {SITE}: run `nox -s docs` (mkdocs build --strict) first")
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser", "google-chrome")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=_binary("chromedriver")))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", sorted(API))
def test_each_estimators_api_page_renders_its_methods_from_the_docstrings(browser, page):
    browser.get((SITE / "api" / page / "index.html").as_uri())
    for cls, methods in API[page]:
        heading = browser.find_element(By.ID, cls)
        assert heading.is_displayed() and cls.rsplit(".", 1)[1] in heading.text, heading.text
        for method in methods:
            entry = browser.find_element(By.ID, f"{cls}.{method}")
            assert method in entry.text, (method, entry.text)
            # the docstring rendered under the signature: a paragraph of text, not an empty stub
            doc = entry.find_element(By.XPATH, "following-sibling::div[contains(@class, 'doc-contents')]")
            assert len(doc.text.split()) >= 3, (method, doc.text)


@pytest.mark.timeout(120)
def test_the_guide_pages_link_to_the_site_pages_they_name(browser):
    """A package README, included as a guide page, links to the site's pages, not to repository files."""
    browser.get((SITE / "guide" / "torch" / "index.html").as_uri())
    assert "orca-torch" in browser.find_element(By.TAG_NAME, "h1").text
    hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.CSS_SELECTOR, "article a")]
    assert hrefs, "the torch guide page has no links"
    assert not [h for h in hrefs if h.endswith(".md")], [h for h in hrefs if h.endswith(".md")]
    browser.get((SITE / "index.html").as_uri())
    links = {a.text.strip(): a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "article a")}
    assert links.get("orca-torch", "").endswith("/guide/torch/"), links
