"""Shared fixtures. CPU by default; ``gpu``/``multi_gpu`` tests skip without the GPUs.

Session-scoped, so that the suite pays for them once (tests/README.md, "Test suite time"):
``built_book`` (the executed book) and ``chrome`` (one headless Chromium for every browser
test module; each module takes it through ``fresh_chrome``, with tests/chrome.py's ``fresh``, which
clears what the module before it left: cookies, cache, the console log, timeouts, window).
Graded classes shared by several modules are in tests/grading/conftest.py. How `make test`
shares its two processes (each module, or each group of modules using one of these
session fixtures, runs whole in one process): tests/groups.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK_BUILD_TIMEOUT_S = 3600   # a clean executed build: ~7 min quiet, over 10 min seen when busy


@pytest.fixture(scope="session", autouse=True)
def torchrun_logs():
    """Every ``torchrun`` the tests start (the chapters' scripts, the book build) keeps its
    ranks' logs in one folder of this test process, removed at its end (``PET_LOG_DIR`` is
    torchrun's ``--log-dir``): without it each launch left a ``torchelastic_*`` folder in the
    temp folder, 54 per run of the suite."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="course-test-torchrun-")
    before = os.environ.get("PET_LOG_DIR")
    os.environ["PET_LOG_DIR"] = folder
    yield folder
    if before is None:
        os.environ.pop("PET_LOG_DIR", None)
    else:
        os.environ["PET_LOG_DIR"] = before
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_leaked_grading_variables(monkeypatch):
    """Each test starts outside a grading run. nbgrader's ``utils.setenv`` (autograde sets
    ``NBGRADER_EXECUTION``, validate also ``NBGRADER_VALIDATING``) restores nothing when the
    run inside it raises, so a test that ran nbgrader in this process before could leave them
    set; a kernel started later inherits them and skips what it skips while graded (a fresh-clone
    CI run: a9's last example printed "skipped while grading" and test_run_all failed). A test
    that needs them sets them itself."""
    for name in ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING"):
        monkeypatch.delenv(name, raising=False)


def _gpus() -> int:
    try:
        from grader.lab.core.backends import get_backend

        return get_backend("torch").gpu_count()
    except Exception:
        return 0


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    from tests import groups

    if config.pluginmanager.hasplugin("xdist") and groups.wanted(config):
        groups.assign(items)    # make test's two processes: tests/groups.py
    n = _gpus()
    for item in items:
        if "built_book" in getattr(item, "fixturenames", ()):
            # its first user may build the whole book (a clone where `make book` did not run
            # first): minutes more than the suite's per-test limit on a busy machine
            item.add_marker(pytest.mark.timeout(BOOK_BUILD_TIMEOUT_S))
        if "multi_gpu" in item.keywords and n < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, this machine has {n}"))
        elif "gpu" in item.keywords and n < 1:
            item.add_marker(pytest.mark.skip(reason="needs a GPU, this machine has none"))


@pytest.fixture(scope="session")
def built_book() -> Path:
    """The executed book in ``_build/html``, built (or brought up to date) once per session.

    It is the same build ``make book`` makes, sharing its execution cache.
    """
    from grader.build import build

    build(ROOT, quiet=True)
    html = ROOT / "_build" / "html"
    assert (html / "index.html").exists()
    return html


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver. Missing ones fail in CI, skip elsewhere."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        msg = ("browser tests need Debian's chromium and chromium-driver: "
               "run `sudo apt-get install chromium chromium-driver` (make test does it as root)")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return browser, driver



@pytest.fixture(scope="session")
def chrome(chromium, tmp_path_factory):
    """One headless Chromium (Selenium driver) for the whole session, keeping its console log
    (``get_log("browser")``). Modules take it through :func:`tests.chrome.fresh`."""
    from tests import chrome as _chrome

    d = _chrome.start(chromium, tmp_path_factory.mktemp("chrome-profile"))
    try:
        yield d
    finally:
        d.quit()
