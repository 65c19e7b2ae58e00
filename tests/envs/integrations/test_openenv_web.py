"""erl-serve's web interface: its JSON API in process, and the page itself in a real headless Chromium (Debian's
package, driven by Selenium) against a real ``erl-serve --web`` process: load, play one move, screenshot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("openenv.core", reason="erl-serve needs the [serve] extra (openenv-core)")

from fastapi.testclient import TestClient  # noqa: E402

LOCAL = "http://127.0.0.1"  # TestClient's own host name, testserver, is not one the server answers to

import erl_envs  # noqa: E402,F401
from erl_envs.integrations.openenv_server import build_app  # noqa: E402
from erl_envs.reflection import ReflectionWrapper  # noqa: E402
from served import ServerProcess  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SMALL = {"size": 3}


def test_web_api_plays_the_env_and_keeps_the_episode_record():
    app = build_app("ERL-FrozenLake-v0", reflection=True, env_kwargs=SMALL, web=True)
    local = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", **SMALL))
    with TestClient(app, base_url=LOCAL) as client:
        assert client.get("/web").headers["content-type"].startswith("text/html")
        sid = client.post("/web/api/sessions").json()["session_id"]
        view = client.post(f"/web/api/sessions/{sid}/reset", json={"seed": 1}).json()
        assert view["text"] == local.reset(seed=1)[0] and view["phase"] == "attempt1"
        assert view["moves"]["Up"] == "```Up```" and view["has_board"]
        board = client.get(f"/web/api/sessions/{sid}/board.png")
        assert board.status_code == 200 and board.content.startswith(b"\x89PNG")
        for reply in ["```Up```", "<prompt>Avoid C. Reach B by moving Left.</prompt>", "```Left```"]:
            view = client.post(f"/web/api/sessions/{sid}/step", json={"text": reply}).json()
            obs, reward, terminated, truncated, info = local.step(reply)
            assert view["text"] == obs and view["reward"] == reward and view["done"] == (terminated or truncated)
        assert [e["phase"] for e in view["log"]] == ["attempt1", "reflect", "attempt2"]
        assert "fell into a hole" in view["log"][0]["comment"]
        assert "Avoid C" in view["system_prompt"]  # the reflection is the prompt of attempt 2
        assert view["done"] and view["record"]["r2"] == 1.0
        refused = client.post(f"/web/api/sessions/{sid}/step", json={"text": "```Up```"})
        assert refused.status_code == 409 and "start a new one" in refused.json()["error"]
        assert client.post(f"/web/api/sessions/{sid}/step", json={"text": "x" * 70_000}).status_code == 422
        assert client.post("/web/api/sessions/nope/reset", json={}).status_code == 404


def test_web_interface_is_off_unless_asked():
    with TestClient(build_app("ERL-FrozenLake-v0", env_kwargs=SMALL), base_url=LOCAL) as client:
        assert client.get("/web").status_code == 404


def test_an_env_without_a_picture_has_no_board():
    app = build_app("ERL-HotpotQA-v0", env_kwargs={"data": "synthetic"}, web=True)
    with TestClient(app, base_url=LOCAL) as client:
        sid = client.post("/web/api/sessions").json()["session_id"]
        view = client.post(f"/web/api/sessions/{sid}/reset", json={"seed": 0}).json()
        assert not view["has_board"] and view["moves"] == {} and view["text"].startswith("Question:")
        assert client.get(f"/web/api/sessions/{sid}/board.png").status_code == 404


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
def test_the_page_in_headless_chromium_plays_a_move(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,1000", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    local = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", **SMALL))
    first = local.reset(seed=1)[0]
    after_up = local.step("```Up```")[0]
    with ServerProcess("--env", "ERL-FrozenLake-v0", "--reflection", "--web", "--env-kwarg", "size=3") as server:
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        try:
            wait = WebDriverWait(driver, 60)
            driver.get(server.url + "/web?seed=1")
            text_of = lambda element_id: driver.execute_script(  # noqa: E731
                f"return document.getElementById('{element_id}').textContent")
            wait.until(lambda d: text_of("observation") == first)
            wait.until(lambda d: d.execute_script("const b = document.getElementById('board');"
                                                  "return b.complete && b.naturalWidth > 0"))
            driver.find_element(By.CSS_SELECTOR, "button[data-move='Up']").click()
            wait.until(lambda d: d.execute_script("return document.body.dataset.steps") == "1")
            wait.until(lambda d: d.execute_script("const b = document.getElementById('board');"
                                                  "return b.complete && b.naturalWidth > 0"))
            assert text_of("observation") == after_up  # the reflection request: attempt 1 fell into a hole
            rows = driver.find_elements(By.CSS_SELECTOR, "#log tbody tr")
            assert len(rows) == 1 and "```Up```" in rows[0].text and "hole" in rows[0].text
            assert "reflect" in text_of("status") and text_of("error") == ""
            shot = tmp_path / "erl-serve-web.png"
            driver.save_screenshot(str(shot))
        finally:
            driver.quit()
        # OpenEnv's own runtime checks still pass with the web interface mounted.
        if shutil.which("openenv"):
            checked = subprocess.run(["openenv", "validate", "--url", server.url], capture_output=True, text=True,
                                     timeout=300)
            assert json.loads(checked.stdout)["summary"]["failed_criteria"] == [], checked.stdout[-2000:]
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
    keep = os.environ.get("ERL_WEB_SCREENSHOT")
    if keep:
        shutil.copy(shot, Path(keep))


def test_a_busy_tab_answers_409_at_once():
    """A tab's calls run one at a time; a call that arrives while the tab's previous one still runs is refused at
    once (409), never queued behind it, and another tab is served meanwhile."""
    import threading
    import time

    import requests

    from served import InProcessServer

    with InProcessServer(build_app("Test-Work-v0", web=True)) as server:
        api = server.url + "/web/api/sessions"
        busy, other = (requests.post(api).json()["session_id"] for _ in range(2))
        for sid in (busy, other):
            assert requests.post(f"{api}/{sid}/reset", json={"seed": 0}).ok
        slow = threading.Thread(target=requests.post, args=(f"{api}/{busy}/step",), kwargs={"json": {"text": "work 3"}})
        slow.start()
        time.sleep(0.5)
        started = time.monotonic()
        refused = [requests.post(f"{api}/{busy}/step", json={"text": "x"}) for _ in range(5)]
        assert all(r.status_code == 409 and "busy" in r.json()["error"] for r in refused)
        assert requests.post(f"{api}/{other}/step", json={"text": "y"}).json()["text"] == "echo y"
        assert time.monotonic() - started < 2.0  # answered while the busy tab still works
        slow.join()
        assert requests.post(f"{api}/{busy}/step", json={"text": "z"}).json()["text"] == "echo z"


def test_the_page_allows_only_its_own_script_and_cannot_be_framed():
    import base64
    import hashlib
    import re

    with TestClient(build_app("ERL-FrozenLake-v0", env_kwargs=SMALL, web=True), base_url=LOCAL) as client:
        page = client.get("/web")
    policy = page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in policy
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy and "http" not in policy
    for tag in ("script", "style"):
        (block,) = re.findall(rf"<{tag}>(.*?)</{tag}>", page.text, flags=re.S)
        digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy
    markup = re.sub(r"<script>.*?</script>", "", page.text, flags=re.S)
    assert not re.search(r"\sstyle=|\son[a-z]+=", markup)  # no inline style or handler the policy would block
