#!/usr/bin/python3
"""Drives airlockd's status page (/admin/) in headless Chromium through Selenium (Debian's
chromium, chromium-driver and python3-selenium), for spec/server/status_page_spec.lua.

Usage: status_page_browser.py BASE_URL ADMIN_KEY TENANT_KEY OUT_DIR [outage]

Steps, each waiting on a condition (bounded) that names what it last saw when it fails:
a bad key is refused on the page; the admin key fills the tables (budgets, tenants, audit,
egress denials); a session created through the API appears in the sessions table and is gone
after its DELETE; a screenshot is saved to OUT_DIR. Prints one JSON object (what it saw) on
stdout; exits non-zero after printing {"error": ...} when a step fails. Chromium runs with its
own profile in OUT_DIR, on loopback only, and is always quit (the spec runs this under
`timeout`, which kills the whole process group past its bound).
"""
import json
import os
import sys
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 60  # per condition; the machine may be loaded


class Step:
    """A condition for WebDriverWait that keeps what it last saw, for the failure message."""

    def __init__(self, what, probe):
        self.what, self.probe, self.last = what, probe, None

    def __call__(self, driver):
        try:
            ok, self.last = self.probe(driver)
        except Exception as e:  # an element replaced between find and read: try again
            ok, self.last = False, "%s: %s" % (type(e).__name__, e)
        return ok


def wait(driver, what, probe):
    step = Step(what, probe)
    try:
        WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(step)
    except Exception:
        raise RuntimeError("%s: not within %d s; last saw: %r" % (what, WAIT_S, step.last))
    return step.last


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def api(base, method, path, key, body=None):
    req = urllib.request.Request(base + path, method=method, data=body,
                                 headers={"X-API-Key": key, "Content-Type": "application/json"})
    with NO_PROXY.open(req, timeout=60) as res:
        return res.status, json.loads(res.read() or b"null")


def texts(driver, css):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def visible(driver, element_id):
    return driver.find_element(By.ID, element_id).is_displayed()


def login(driver, key):
    field = driver.find_element(By.ID, "key")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "login-button").click()


def run(driver, base, admin_key, tenant_key, out_dir, seen):
    driver.get(base + "/admin/")
    wait(driver, "the login form", lambda d: (visible(d, "login"), d.title))

    login(driver, "not-the-admin-key-" + "x" * 20)
    seen["refusal"] = wait(driver, "the bad key refused on the page", lambda d: (
        visible(d, "login-error") and "Refused" in d.find_element(By.ID, "login-error").text,
        d.find_element(By.ID, "login-error").text))
    seen["status_hidden_after_refusal"] = not visible(driver, "status")
    seen["key_kept_after_refusal"] = driver.execute_script(
        "return sessionStorage.getItem('airlock-admin-key')")

    login(driver, admin_key)
    seen["budgets"] = wait(driver, "the budgets table filled", lambda d: (
        visible(d, "status") and len(texts(d, "#budgets tbody tr[data-budget]")) >= 5,
        texts(d, "#budgets tbody tr")))
    seen["tenants"] = texts(driver, "#tenants tbody tr")
    seen["nodes_note"] = driver.find_element(By.ID, "nodes-note").text
    seen["audit"] = wait(driver, "the audit table filled", lambda d: (
        any("page-spec-command" in t for t in texts(d, "#audit tbody tr")), texts(d, "#audit tbody tr")))
    seen["egress"] = wait(driver, "the egress denials filled", lambda d: (
        any("denied.test" in t for t in texts(d, "#egress tbody tr")), texts(d, "#egress tbody tr")))
    seen["key_in_url"] = admin_key in driver.current_url

    status, created = api(base, "POST", "/v1/sessions", tenant_key, b"{}")
    sid = created["session_id"]
    seen["session_id"] = sid
    row = "#sessions tbody tr[data-session-id='%s']" % sid
    seen["session_row"] = wait(driver, "the new session in the sessions table", lambda d: (
        len(texts(d, row)) == 1, texts(d, row) or texts(d, "#sessions tbody tr")))[0]
    seen["session_groups"] = texts(driver, "#sessions tbody tr.group")
    seen["screenshot"] = os.path.join(out_dir, "status-page.png")
    driver.set_window_size(1280, 1000)
    driver.save_screenshot(seen["screenshot"])

    api(base, "DELETE", "/v1/sessions/" + sid, tenant_key)
    wait(driver, "the deleted session gone from the sessions table", lambda d: (
        len(texts(d, row)) == 0, texts(d, "#sessions tbody tr")))
    seen["session_gone"] = True

    driver.find_element(By.ID, "logout").click()
    wait(driver, "signed out", lambda d: (visible(d, "login"), visible(d, "status")))
    seen["key_after_sign_out"] = driver.execute_script("return sessionStorage.getItem('airlock-admin-key')")
    # the page's own errors (a refused or absent resource is the answer it shows, not one)
    seen["console_errors"] = [e["message"] for e in driver.get_log("browser")
                              if e.get("level") == "SEVERE" and "Failed to load resource" not in e["message"]]
    seen["failed_loads"] = [e["message"] for e in driver.get_log("browser") if "Failed to load resource" in e["message"]]


def run_outage(driver, base, admin_key, out_dir, seen):
    """A fleet whose database is down: the page shows what the node knows, marked."""
    driver.get(base + "/admin/")
    wait(driver, "the login form", lambda d: (visible(d, "login"), d.title))
    login(driver, admin_key)
    seen["banner"] = wait(driver, "the outage banner", lambda d: (
        visible(d, "banner") and "cannot be reached" in d.find_element(By.ID, "banner").text,
        d.find_element(By.ID, "banner").text))
    seen["nodes_note"] = wait(driver, "the nodes marked as the node's last view", lambda d: (
        "last view" in d.find_element(By.ID, "nodes-note").text and len(texts(d, "#nodes tbody tr[data-node]")) > 0,
        d.find_element(By.ID, "nodes-note").text))
    seen["nodes"] = texts(driver, "#nodes tbody tr[data-node]")
    seen["screenshot"] = os.path.join(out_dir, "status-page-outage.png")
    driver.save_screenshot(seen["screenshot"])


def main():
    base, admin_key, tenant_key, out_dir = sys.argv[1:5]
    outage = len(sys.argv) > 5 and sys.argv[5] == "outage"
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--no-proxy-server", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--user-data-dir=" + os.path.join(out_dir, "profile"), "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path="/usr/bin/chromedriver", port=0,
                      log_path=os.path.join(out_dir, "chromedriver.log"))
    seen = {}
    driver = webdriver.Chrome(service=service, options=opts)
    try:
        driver.set_page_load_timeout(WAIT_S)
        driver.set_script_timeout(WAIT_S)
        if outage:
            run_outage(driver, base, admin_key, out_dir, seen)
        else:
            run(driver, base, admin_key, tenant_key, out_dir, seen)
    except Exception as e:
        seen["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        driver.quit()
    print(json.dumps(seen))
    sys.exit(1 if "error" in seen else 0)


if __name__ == "__main__":
    main()
