#!/usr/bin/env python3
"""Checks the relative links of Markdown files: every linked file exists inside the repository,
and every #anchor names a heading (or an explicit anchor) of the file it points into, by GitHub's
rules for heading anchors. Links with a scheme (https:, mailto:) are not checked.

    python3 tests/check_links.py              README.md and docs/*.md
    python3 tests/check_links.py FILE.md ...  those files

Prints one line per broken link and exits 1 when there is one. Python 3 standard library only;
`make check-docs` runs it, and CI runs that."""
import glob
import os
import re
import sys
import unicodedata
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_ATTR = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]*)\"", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:name|id)=\"([^\"]*)\"", re.I)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


def prose_lines(text):
    """(line number, line) for each line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
        elif m:
            fence = m.group(1)
        else:
            yield n, line


def heading_text(raw):
    """The text GitHub renders for a heading's Markdown: code spans, links and emphasis undone."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), raw)
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text


def slug(text):
    """GitHub's anchor for a heading: lower case; letters, digits, marks, '-' and '_' kept; each
    space a '-'; everything else dropped."""
    out = []
    for c in text.lower():
        if c == " ":
            out.append("-")
        elif c in "-_" or unicodedata.category(c)[0] in "LNM":
            out.append(c)
    return "".join(out)


_anchors = {}


def anchors(path):
    """The anchors of the Markdown file at path: its headings' slugs, with GitHub's -1, -2 ...
    for repeats, and its explicit <a name> and id anchors."""
    if path not in _anchors:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read()):
                m = HEADING.match(line)
                if m:
                    s = slug(heading_text(m.group(2)))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else f"{s}-{n}")
                found.update(HTML_ANCHOR.findall(line))
        _anchors[path] = found
    return _anchors[path]


def targets(line):
    """The link targets on one line of prose."""
    prose = CODE_SPAN.sub("", line)
    yield from (m.group(2) for m in LINK.finditer(prose))
    yield from REF_DEF.findall(prose)
    yield from HTML_ATTR.findall(prose)


def check_link(md, target):
    """None when target, a link in the Markdown file md, resolves; else why not."""
    if not target or SCHEME.match(target):
        return None
    path, _, frag = target.partition("#")
    path = urllib.parse.unquote(path)
    if path.startswith("/"):
        dest = os.path.normpath(os.path.join(ROOT, path.lstrip("/")))
    elif path:
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path))
    else:
        dest = md
    rel = os.path.relpath(dest, ROOT)
    if rel == ".." or rel.startswith(".." + os.sep):
        return f"{path} is outside the repository"
    if not os.path.exists(dest):
        return f"{rel} does not exist"
    if frag and dest.endswith(".md") and os.path.isfile(dest):
        if urllib.parse.unquote(frag) not in anchors(dest):
            return f"{rel} has no heading or anchor #{frag}"
    return None


def main(argv):
    files = argv or [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))
    broken = links = 0
    for md in files:
        md = os.path.abspath(md)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        for n, line in prose_lines(text):
            for target in targets(line):
                links += 1
                why = check_link(md, target)
                if why:
                    broken += 1
                    print(f"{os.path.relpath(md, ROOT)}:{n}: ({target}): {why}")
    print(f"check_links: {len(files)} files, {links} links, {broken} broken",
          file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
