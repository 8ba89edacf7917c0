#!/usr/bin/env python3
"""Runs the README's examples as written, from the repository's root, against a live blurd
(make check-readme starts one on a free port with scripts/with-server.sh, which sets BLURD_URL:
the examples' http://localhost:8080 becomes that URL, so a server already on 8080, such as the
README's own, does not get in the way), and the command-line example of docs/operations.md.
Every `curl` and `./build/blurd` command in README.md's code blocks (a `printf ... |` line
joined to the line after it) must exit 0 and write nothing into the repository; an answer
written with `-o FILE` must be an image of FILE's type, one printed on stdout a JSON object
without "error", and headers printed with `-D -` a 200 whose Content-Type and X-Method are those
the README shows (in the block after the command), with every header it shows. The operations.md
example must give, line by line, the file, output, status, method and backend it shows. Files
the commands write are removed afterwards. The setup commands (install-deps.sh, make, the server
itself, docker) are not run here: .ci/run and the chroot run them. Exits 1 with the failing
command and why."""
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
URL = os.environ.get("BLURD_URL", "http://localhost:8080")
MAGIC = {".png": b"\x89PNG", ".jpg": b"\xff\xd8\xff", ".jpeg": b"\xff\xd8\xff", ".webp": b"RIFF"}
failures = []


def code_lines(text):
    """The lines of the Markdown text's code blocks: indented by 4, or fenced."""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield line
        elif line.startswith("    "):
            yield line[4:]


def readme_commands(text):
    """The README's example commands, with a leading '$ ' dropped and continuations joined."""
    cmds, pending = [], ""
    for line in code_lines(text):
        line = pending + line.lstrip() if pending else line
        pending = ""
        cmd = line[2:] if line.startswith("$ ") else line
        if cmd.rstrip().endswith("|"):
            pending = cmd + " "
        elif re.match(r"(curl|printf|\./build/blurd \w+ )", cmd) and "./build/blurd &&" not in cmd:
            cmds.append(cmd)
    return cmds


def shown_headers(text, cmd):
    """The header lines the README shows after the cmd line: from the next status line up to the
    end of its block."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == cmd:
            start = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("HTTP/")), None)
            out = []
            for nxt in lines[start:] if start else []:
                if nxt.startswith("```") or not nxt.strip():
                    break
                out.append(nxt)
            return out
    return []


def run(cmd):
    """Runs cmd with bash in the repository's root, against URL; returns (exit status, stdout,
    stderr)."""
    cmd = cmd.replace("http://localhost:8080", URL)
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def fail(cmd, why):
    failures.append(f"{cmd}\n    {why}")
    print(f"FAIL {cmd}\n    {why}", file=sys.stderr)


def check_output_file(cmd, args):
    if "-o" not in args:
        return None
    name = args[args.index("-o") + 1]
    path = os.path.join(ROOT, name)
    head = open(path, "rb").read(12) if os.path.isfile(path) else b""
    want = MAGIC.get(os.path.splitext(name)[1].lower())
    if not want or not head.startswith(want):
        fail(cmd, f"{name} is not a {os.path.splitext(name)[1]} image: {head!r}")
    return name


def check_headers(cmd, out, shown):
    got = out.decode(errors="replace").split("\r\n\r\n")[0].split("\r\n")
    if not got[0].startswith("HTTP/1.1 200"):
        fail(cmd, f"status line {got[0]!r}")
    real = {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in got[1:] if ":" in h}
    for h in shown[1:]:
        name, value = h.split(":", 1)[0].lower(), h.split(":", 1)[1].strip()
        if name not in real:
            fail(cmd, f"the README shows {name}, which the server does not send")
        elif name in ("content-type", "x-method", "x-backend") and real[name] != value:
            fail(cmd, f"the README shows {name}: {value}, the server sends {real[name]}")


def check_readme():
    text = open(os.path.join(ROOT, "README.md")).read()
    cmds = readme_commands(text)
    for cmd in cmds:
        before = set(os.listdir(ROOT))
        written = [a for a in re.findall(r"(?:-o |\s)(/tmp/\S+)", cmd) if os.path.exists(a)]
        for name in written:
            os.remove(name)
        rc, out, err = run(cmd)
        args = shlex.split(cmd.split("|")[-1])
        if rc != 0:
            fail(cmd, f"exit {rc}: {err.strip()[:300]}")
        elif "-D" in args:
            check_headers(cmd, out, shown_headers(text, cmd))
            check_output_file(cmd, args)
        elif args[0] == "./build/blurd":
            check_output_file(cmd, args[:-1] + ["-o", args[-1]])
        elif not check_output_file(cmd, args):
            try:
                body = json.loads(out)
                if "error" in body:
                    fail(cmd, f"error answer: {body['error']}")
            except ValueError:
                fail(cmd, f"stdout is not JSON: {out[:80]!r}")
        for name in set(os.listdir(ROOT)) - before:
            fail(cmd, f"writes {name} into the repository")
            os.remove(os.path.join(ROOT, name))
        for name in re.findall(r"(?:-o |\s)(/tmp/\S+)", cmd):
            if os.path.isfile(name):
                os.remove(name)
        print(f"  ok: {cmd[:110]}")
    return len(cmds)


def check_cli_example():
    """docs/operations.md's `$ ./build/blurd ... --json` block against a real run."""
    lines = list(code_lines(open(os.path.join(ROOT, "docs/operations.md")).read()))
    start = [i for i, l in enumerate(lines) if l.startswith("$ ./build/blurd ") and "--json" in l]
    if len(start) != 1:
        fail("docs/operations.md", f"{len(start)} '$ ./build/blurd ... --json' examples, not 1")
        return
    cmd = lines[start[0]][2:]
    shown = []
    for line in lines[start[0] + 1:]:
        if line.startswith("$ "):  # the next command: `echo $?`
            break
        if line.startswith("{"):
            shown.append(json.loads(line))
    rc, out, err = run(cmd)
    got = [json.loads(l) for l in out.decode().splitlines()]
    keys = ("file", "output", "status", "method", "backend")
    if [[g.get(k) for k in keys] for g in got] != [[s.get(k) for k in keys] for s in shown]:
        fail(cmd, f"gives {[[g.get(k) for k in keys] for g in got]}")
    if rc != (1 if any(s["status"] != 200 for s in shown) else 0):
        fail(cmd, f"exit {rc}")
    print(f"  ok: {cmd[:110]}")


def main():
    n = check_readme()
    check_cli_example()
    if failures:
        print(f"check-readme: {len(failures)} of {n + 1} examples failed", file=sys.stderr)
        return 1
    print(f"check-readme: {n} README examples and the operations.md command line ran as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
