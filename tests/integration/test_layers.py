"""The layering rule of docs/layout.md, checked on every source and header:

    core < store < net < guard < api < the top-level files of src/

A module's header sits beside its source (src/core/locktab.h next to src/core/locktab.c), so
the folder a file is in is its layer, and every include of a module names that folder
("core/locktab.h"; a top-level module of src/ is "gateway.h"): a wrong-way include is visible
in the line itself, and this test reads the layer from it. A module includes only the headers
of its own layer and the layers below it. include/leasegate/ holds only what every layer may
read: the context's declarations (server.h, request.h, config.h: data, no code of their own)
and the small shared helpers (dlist.h, container.h). The CLI (src/cli/) is a client, not a
layer of the server: it shares only the server's core, store and net helpers, never the
guard's or an endpoint's code (main.c, at the top, starts either).

No server is started; the test reads the tree.
"""

import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.join(ROOT, "src")
ORDER = ["core", "store", "net", "guard", "api", "top"]
LAYERS = set(ORDER) - {"top"} | {"cli"}
SHARED = {"server", "request", "config", "dlist", "container"}
CLI_MAY_USE = {"core", "store", "net", "cli"}
INCLUDE = re.compile(r'#\s*include\s+"([^"]+)"')


def layer_of_path(path):
    """The layer of a file under src/, from its folder."""
    rel = os.path.relpath(os.path.dirname(path), SRC)
    return "top" if rel == "." else rel


def layer_of_include(spelled):
    """The layer an include names ("core/heap.h" -> core, "gateway.h" -> top), or None for
    the shared headers and anything that is not one of ours."""
    if spelled.startswith("leasegate/"):
        return None
    parts = spelled.split("/")
    if len(parts) == 2 and parts[0] in LAYERS:
        return parts[0]
    if len(parts) == 1 and os.path.exists(os.path.join(SRC, spelled)):
        return "top"
    return None


def sources():
    for d, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.join(d, f)


def reaches_up(src, dst):
    if src == "cli":
        return dst not in CLI_MAY_USE
    if dst == "cli":
        return src != "top"
    return ORDER.index(dst) > ORDER.index(src)


def violations(files):
    """Every include in files against the rule: (path, what is wrong)."""
    bad = []
    for path in files:
        src = layer_of_path(path)
        with open(path, errors="replace") as fh:
            text = fh.read()
        for spelled in INCLUDE.findall(text):
            if spelled.startswith("leasegate/"):
                name = spelled[len("leasegate/"):-2]
                if name not in SHARED and name != "web_assets":
                    bad.append("%s includes %s, which is not a shared header" % (path, spelled))
                continue
            parts = spelled.split("/")
            if len(parts) == 1 and spelled.endswith(".h") and os.path.exists(os.path.join(os.path.dirname(path), spelled)) \
                    and src != "top":
                bad.append("%s includes %s without naming its layer" % (path, spelled))
                continue
            dst = layer_of_include(spelled)
            if dst is not None and reaches_up(src, dst):
                bad.append("%s (%s) includes %s (%s)" % (os.path.relpath(path, ROOT), src, spelled, dst))
    return bad


class LayerTest(unittest.TestCase):
    def test_include_leasegate_holds_only_shared_headers(self):
        here = {h[:-2] for h in os.listdir(os.path.join(ROOT, "include", "leasegate")) if h.endswith(".h")}
        self.assertEqual(here - SHARED, set(), "module headers left in include/leasegate/")
        for name in here:
            with open(os.path.join(ROOT, "include", "leasegate", name + ".h")) as fh:
                opening = fh.read(600)
            self.assertRegex(opening, r"every layer", "include/leasegate/%s.h does not say that every layer may read it" % name)

    def test_every_header_sits_in_a_layer(self):
        for path in sources():
            if path.endswith(".h"):
                self.assertIn(layer_of_path(path), set(ORDER) | {"cli"}, "%s is in no layer" % path)

    def test_most_sources_have_their_header_beside_them(self):
        cs = [p for p in sources() if p.endswith(".c")]
        beside = [p for p in cs if os.path.exists(p[:-2] + ".h")]
        self.assertGreater(len(beside), len(cs) // 2, "fewer than half of the sources have a header beside them")

    def test_no_include_reaches_up(self):
        bad = violations(list(sources()))
        self.assertEqual(bad, [], "includes against docs/layout.md's rule:\n  " + "\n  ".join(bad))

    def test_the_check_sees_a_violation(self):
        """The rule's own check: a core file including an api header, a module header included
        without its layer, and a module header put back in include/leasegate/ are all caught."""
        import tempfile
        probe_dir = os.path.join(SRC, "core")
        with tempfile.NamedTemporaryFile("w", suffix=".c", dir=probe_dir, delete=False) as fh:
            fh.write('#include "api/dispatch.h"\n#include "heap.h"\n#include "leasegate/locktab.h"\n')
            probe = fh.name
        try:
            bad = violations([probe])
        finally:
            os.unlink(probe)
        self.assertEqual(len(bad), 3, bad)


if __name__ == "__main__":
    unittest.main(verbosity=2)
