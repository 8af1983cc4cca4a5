"""Every relative link and #anchor in the project's Markdown resolves.

Checked: README.md, docs/*.md, clients/*/README.md and examples/README.md. A link to a file
or folder must name one that exists inside the checkout; a #anchor must name a heading of
the page it points to, spelled as GitHub spells heading ids (lower case, punctuation dropped,
spaces as hyphens, -1, -2 ... for repeats). Links inside code (fenced blocks, indented
blocks, `spans`) are not links and are skipped. Every page in docs/ must also be reachable
from the README by following links, so no page is orphaned. No server is needed.
"""

import glob
import os
import re
import tempfile
import unittest
import unicodedata

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def checked_pages(root=ROOT):
    pages = [os.path.join(root, "README.md")]
    pages += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    pages += sorted(glob.glob(os.path.join(root, "clients", "*", "README.md")))
    pages.append(os.path.join(root, "examples", "README.md"))
    return [p for p in pages if os.path.exists(p)]


def prose_lines(text):
    """(line number, line) for every line outside fenced and indented code blocks."""
    fence = None
    prev_blank = True
    in_indented = False
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m and len(line) - len(stripped) <= 3:
            fence = m.group(1)
            continue
        # An indented code block starts after a blank line (not inside a list item's
        # continuation, which this project's pages indent by two spaces only).
        if line.startswith("    ") and (prev_blank or in_indented):
            in_indented = True
            continue
        in_indented = False
        prev_blank = not line.strip()
        yield n, line


def strip_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", "", line)


def slug(heading):
    """GitHub's id for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LN" or cat in ("Mn", "Mc", "Pc"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        ids, seen = set(), {}
        for _, line in prose_lines(text):
            m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else "%s-%d" % (base, n))
            for hid in HTML_ID.findall(line):
                ids.add(hid)
        cache[path] = ids
    return cache[path]


def links(path):
    """(line number, target) of every link in a page's prose."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        m = REF_DEF.match(line)
        if m:
            yield n, m.group(1)
            continue
        for m in INLINE_LINK.finditer(strip_code_spans(line)):
            yield n, m.group(1)


def problems(pages, root=ROOT):
    """Every broken link, as 'file:line: target: why', and the pages each page links to."""
    bad, edges = [], {}
    for page in pages:
        edges[page] = set()
        for n, target in links(page):
            where = "%s:%d: %s" % (os.path.relpath(page, root), n, target)
            if SCHEME.match(target):
                continue  # http(s), mailto: not checked here (no network in tests)
            path_part, _, anchor = target.partition("#")
            if path_part.startswith("/"):
                bad.append(where + ": an absolute path does not resolve on GitHub or in a checkout")
                continue
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path_part)) if path_part else page
            if os.path.commonpath([dest, root]) != root:
                bad.append(where + ": points outside the project")
                continue
            if not os.path.exists(dest):
                bad.append(where + ": no such file or folder")
                continue
            if os.path.isdir(dest):
                readme = os.path.join(dest, "README.md")
                if anchor and not os.path.exists(readme):
                    bad.append(where + ": an anchor into a folder without a README.md")
                    continue
                dest = readme if os.path.exists(readme) else dest
            if dest.endswith(".md"):
                edges[page].add(dest)
            if anchor:
                if not dest.endswith(".md"):
                    bad.append(where + ": an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    bad.append(where + ": no heading with the id '%s' in %s" % (anchor, os.path.relpath(dest, root)))
    return bad, edges


class DocsLinkTests(unittest.TestCase):
    def test_every_relative_link_and_anchor_resolves(self):
        pages = checked_pages()
        self.assertIn(os.path.join(ROOT, "docs", "locks.md"), pages)
        bad, edges = problems(pages)
        self.assertEqual(bad, [], "broken links:\n" + "\n".join(bad))
        self.assertGreater(sum(len(e) for e in edges.values()), 20, "no links found: the link scanner is broken")

    def test_every_docs_page_is_reachable_from_the_readme(self):
        pages = checked_pages()
        _, edges = problems(pages)
        seen, todo = set(), [os.path.join(ROOT, "README.md")]
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            todo.extend(edges.get(p, ()))
        orphans = [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")) if p not in seen]
        self.assertEqual(orphans, [], "docs pages no link leads to from README.md")

    def test_the_checker_finds_broken_links(self):
        """The checker itself: each kind of defect is reported, and code is not a link."""
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "docs"))
            with open(os.path.join(d, "docs", "a.md"), "w") as f:
                f.write("# Title\n\n## Keys: who may do what?\n\n## Keys: who may do what?\n\n"
                        "## `run` and `leasegate_x_total` — ok\n")
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("# R\n\n"
                        "[good](docs/a.md#keys-who-may-do-what) [repeat](docs/a.md#keys-who-may-do-what-1)\n"
                        "[code heading](docs/a.md#run-and-leasegate_x_total--ok) [self](#r)\n"
                        "[gone](docs/missing.md) [bad anchor](docs/a.md#nope) [bad self](#nope)\n"
                        "[outside](../x.md) [abs](/docs/a.md) [web](https://example.com/#x)\n"
                        "`[in code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n\n"
                        "    [indented](nowhere.md)\n\n"
                        "[ref]: docs/nothing.md\n")
            bad, edges = problems([os.path.join(d, "README.md")], root=d)
        kinds = sorted(b.split(": ", 1)[1] for b in bad)
        self.assertEqual(kinds, sorted([
            "docs/missing.md: no such file or folder",
            "docs/a.md#nope: no heading with the id 'nope' in docs/a.md",
            "#nope: no heading with the id 'nope' in README.md",
            "../x.md: points outside the project",
            "/docs/a.md: an absolute path does not resolve on GitHub or in a checkout",
            "docs/nothing.md: no such file or folder",
        ]), bad)

    def test_slugs_as_github_spells_them(self):
        self.assertEqual(slug("API keys: who may do what"), "api-keys-who-may-do-what")
        self.assertEqual(slug("`leasegate run`: hold a lock"), "leasegate-run-hold-a-lock")
        self.assertEqual(slug("Backups, and tokens after a restore"), "backups-and-tokens-after-a-restore")
        self.assertEqual(slug("Client libraries: Python and Node.js"), "client-libraries-python-and-nodejs")
        self.assertEqual(slug("Against the targets (2026-11-22)"), "against-the-targets-2026-11-22")


if __name__ == "__main__":
    unittest.main()
