#!/usr/bin/env python3
"""Sends base64 JSON bodies to every endpoint of blurd through a Prism validation proxy
(@stoplight/prism-cli 5, `prism proxy`) and counts Prism's violations (its sl-violations header):
of every response, and of every request meant to be valid. Requests meant to be invalid (an
unknown key, no image, a wrong enum) must be flagged by Prism and answered 400 by blurd.
Multipart bodies are left out: Prism corrupts them when it forwards them.

    prism proxy openapi.json http://127.0.0.1:8080 --port 4010 &
    python3 tests/openapi/prism_check.py http://127.0.0.1:4010 openapi.json

Exits 1 when any violation is counted."""
import base64
import json
import sys
import urllib.error
import urllib.request

PRISM, DOC = sys.argv[1], json.load(open(sys.argv[2]))
DATA = "tests/data/"
PNG = base64.b64encode(open(DATA + "red_square.png", "rb").read()).decode()
JPG = base64.b64encode(open(DATA + "photo_1080p.jpg", "rb").read()).decode()
counts = {"requests": 0, "violations": 0, "flagged_invalid": 0, "invalid": 0}


def send(method, path, body=None, headers=None, valid=True):
    r = urllib.request.Request(PRISM + path, data=body, method=method, headers=headers or {})
    try:
        resp = urllib.request.urlopen(r, timeout=120)
        status, hdrs = resp.status, resp.headers
        resp.read()
    except urllib.error.HTTPError as e:
        status, hdrs = e.code, e.headers
        e.read()
    counts["requests"] += 1
    found = json.loads(hdrs.get("sl-violations") or "[]")
    flagged = False
    for v in found:
        if v["location"][0] == "request" and not valid:
            flagged = True
            continue
        counts["violations"] += 1
        print(f"violation: {method} {path} -> {status}: {v}")
    if not valid:
        counts["invalid"] += 1
        counts["flagged_invalid"] += flagged
        if status != 400:
            counts["violations"] += 1
            print(f"invalid request {method} {path} answered {status}, not 400")


def post_json(path, obj, accept="application/json", valid=True):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    send("POST", path, body, {"Content-Type": "application/json", "Accept": accept}, valid)


for path, item in DOC["paths"].items():
    if "get" in item:
        send("GET", path)
        send("GET", path, headers={"Accept-Encoding": "gzip"})
    if "post" not in item:
        continue
    for image in (PNG, "data:image/png;base64," + PNG, PNG.rstrip("=")):
        for accept in ("application/json", "image/png", "*/*"):
            post_json(path, {"image": image}, accept)
    post_json(path, {"image": JPG})
    post_json(path + "?psnr=false", {"image": PNG})
    post_json(path + "?psnr=true", {"image": PNG})
    post_json(path, {"image": PNG}, accept="image/bmp")  # a 406
    post_json(path, {"image": PNG, "nosuch": 1}, valid=False)
    post_json(path, {}, valid=False)
    post_json(path, b"{not json", valid=False)
print(
    f"prism_check: {counts['requests']} requests, {counts['violations']} violations; Prism "
    f"flagged {counts['flagged_invalid']} of the {counts['invalid']} requests meant invalid"
)
sys.exit(1 if counts["violations"] else 0)
