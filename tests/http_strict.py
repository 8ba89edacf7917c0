#!/usr/bin/env python3
"""Every answer blurd gives to malformed or hostile HTTP, read by a strict HTTP/1.1 parser (h11):
each case is sent on its own connection, and what comes back must be exactly one valid response
(an optional 100 Continue, then the final one), blurd's JSON error with the expected status and
code, followed by nothing but the close. Then a few sound requests, pipelined on one connection,
must each get one valid response. Usage: tests/http_strict.py BLURD_BIN (Debian's python3-h11)."""
import json
import socket
import subprocess
import sys
import time

import h11

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
POST = b"POST /blur?sigma=2 HTTP/1.1\r\nHost: x\r\n"

CASES = [  # name, bytes, status, code
    ("two Content-Lengths", POST + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400, "invalid_request"),
    ("Content-Length list", POST + b"Content-Length: 5, 5\r\n\r\nhello", 400, "invalid_request"),
    ("Content-Length +N", POST + b"Content-Length: +5\r\n\r\nhello", 400, "invalid_request"),
    ("Content-Length -1", POST + b"Content-Length: -1\r\n\r\n", 400, "invalid_request"),
    ("Content-Length overlong", POST + b"Content-Length: 99999999999999999999999\r\n\r\n", 400, "invalid_request"),
    ("Content-Length and chunked", POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "invalid_request"),
    ("gzip coding", POST + b"Transfer-Encoding: gzip\r\n\r\n", 501, "not_implemented"),
    ("space before colon", POST + b"Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello", 400, "invalid_request"),
    ("obs-fold", POST + b"Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello", 400, "invalid_request"),
    ("NUL in a value", POST + b"X-A: a\x00b\r\nContent-Length: 0\r\n\r\n", 400, "invalid_request"),
    ("bare CR in a value", POST + b"X-A: a\rb\r\nContent-Length: 0\r\n\r\n", 400, "invalid_request"),
    ("bare LF", b"GET /healthz HTTP/1.1\nHost: x\n\n", 400, "invalid_request"),
    ("no Host", b"GET /healthz HTTP/1.1\r\n\r\n", 400, "invalid_request"),
    ("no colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400, "invalid_request"),
    ("HTTP/2.0", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    ("HTTP/0.9 style", b"GET /healthz\r\n\r\n", 400, "invalid_request"),
    ("unknown Expect", POST + b"Expect: 999-foo\r\nContent-Length: 0\r\n\r\n", 417, "expectation_failed"),
    ("bad chunk size", POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "invalid_request"),
    ("chunk without CRLF", POST + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX", 400, "invalid_request"),
    ("chunk size overflow", POST + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", 400, "invalid_request"),
    ("request line too long", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
    ("headers too large", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-P: " + b"p" * 40000 + b"\r\n\r\n", 431, "headers_too_large"),
    ("too many header lines", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-P: p\r\n" * 120 + b"\r\n", 431, "headers_too_large"),
    ("body over --max-body", POST + b"Content-Length: 99999999999\r\n\r\n", 413, "body_too_large"),
    ("unknown path", b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "not_found"),
]


def start(binary):
    p = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", "0", "--access-log", "off",
                          "--backend", "cpu", "--warm-image", "0", "--max-body", "1M"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    return p, port


def exchange(port, data, seconds=3.0):
    """Sends data, returns what the server sends until it closes (or seconds pass)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(0.2)
    out, end = b"", time.time() + seconds
    while time.time() < end:
        try:
            k = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not k:
            break
        out += k
    s.close()
    return out


def responses(raw, n, method="GET"):
    """Parses raw as the answers to n requests with h11; returns [(status, headers, body)]."""
    conn = h11.Connection(our_role=h11.CLIENT)
    got = []
    conn.receive_data(raw)
    conn.receive_data(b"")  # the server closed
    for _ in range(n):
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
        conn.send(h11.EndOfMessage())
        status, headers, body = None, None, b""
        while True:
            ev = conn.next_event()
            if isinstance(ev, h11.InformationalResponse):
                continue
            if isinstance(ev, h11.Response):
                status, headers = ev.status_code, dict(ev.headers)
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                break
            else:
                raise AssertionError("unexpected %r" % (ev,))
        got.append((status, headers, body))
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            break
        conn.start_next_cycle()
    ev = conn.next_event()
    if len(got) == n and not isinstance(ev, (h11.ConnectionClosed, type(h11.NEED_DATA))):
        raise AssertionError("bytes after the last answer: %r" % (ev,))
    return got


def main():
    p, port = start(sys.argv[1])
    failed = 0
    try:
        for name, data, status, code in CASES:
            raw = exchange(port, data + SMUGGLED)
            try:
                got = responses(raw, 1)
                st, headers, body = got[0]
                err = json.loads(body)["error"]
                assert st == status and err["status"] == status and err["code"] == code, (st, err)
                assert headers.get(b"connection", b"").lower() == b"close", headers
                assert headers.get(b"content-type") == b"application/json", headers
                print("ok   %-28s %d %s" % (name, st, code))
            except Exception as e:  # one line a case, then the verdict
                failed += 1
                print("FAIL %-28s %r: %.300r" % (name, e, raw))
        sound = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"POST /blur?sigma=2 HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"
                 b"GET /healthz HTTP/1.0\r\n\r\n")
        raw = exchange(port, sound)
        conn = h11.Connection(our_role=h11.CLIENT)
        conn.receive_data(raw)
        conn.receive_data(b"")
        statuses = []
        for method in ("GET", "HEAD", "POST", "GET"):
            conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
            conn.send(h11.EndOfMessage())
            while True:
                ev = conn.next_event()
                if isinstance(ev, h11.Response):
                    statuses.append(ev.status_code)
                if isinstance(ev, h11.EndOfMessage):
                    break
            if conn.their_state is h11.MUST_CLOSE:
                break
            conn.start_next_cycle()
        ok = statuses == [200, 200, 415, 200]
        failed += not ok
        print("%s pipelined sound requests: %s" % ("ok  " if ok else "FAIL", statuses))
    finally:
        p.terminate()
        p.wait(10)
    print("http_strict: %d of %d cases failed" % (failed, len(CASES) + 1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
