"""The controller's status page in headless Chromium (Debian's chromium, chromium-driver and
python3-selenium): it asks for the token, then shows the ready replicas the controller has, and
after a scale event the new replicas and the event, refreshed by its own script; the browser's
console holds no error. Touches READY_FLAG once the first state is on the page (the caller then
makes the scale event). Prints one line; exits 1 on a failure.

    python3 status_page.py URL TOKEN READY_BEFORE READY_AFTER TIMEOUT_S READY_FLAG
"""
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

url, token, before, after, timeout, flag = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
fails = []


def ready_rows():
    try:
        return len(d.find_elements(By.CSS_SELECTOR, "#replicas tr.replica.ready"))
    except Exception:  # noqa: BLE001 - the table is being swapped by the page's refresh
        return -1


def wait_for(what, test):
    end = time.time() + timeout
    while time.time() < end:
        if test():
            return True
        time.sleep(0.3)
    fails.append(f"{what}: not within {timeout} s (ready rows {ready_rows()})")
    return False


try:
    d.get(url + "/")
    if not d.find_elements(By.ID, "token"):
        fails.append("the page did not ask for the token")
    else:
        d.find_element(By.ID, "token").send_keys(token)
        d.find_element(By.CSS_SELECTOR, "#login button").click()
    if wait_for(f"{before} ready replica(s) shown", lambda: ready_rows() == before):
        open(flag, "w").close()
        wait_for(f"{after} ready replicas shown after the scale event", lambda: ready_rows() == after)
        events = " ".join(e.text for e in d.find_elements(By.CSS_SELECTOR, "#events li"))
        if f"{before} \u2192 {after}" not in events:
            fails.append(f"the scale event {before} -> {after} is not listed: {events[:300]!r}")
        if not d.find_elements(By.CSS_SELECTOR, "#chart polyline"):
            fails.append("no chart of the last hour")
    errors = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]
    if errors:
        fails.append(f"console errors: {errors[:3]}")
finally:
    d.quit()
print(f"status page: {'ok' if not fails else 'FAIL: ' + '; '.join(fails)}")
sys.exit(1 if fails else 0)
