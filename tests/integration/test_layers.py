"""The layering rule of docs/layout.md, checked on every source and header:

    core < store < net < guard < api < the top-level files of src/

A module (foo.c and include/leasegate/foo.h) belongs to the folder of src/ its .c file is
in; a module includes only the headers of its own layer and the layers below it. The
context's declarations (server.h, request.h, config.h: data, no code of their own) may be
read by every layer. The CLI (src/cli/) is a client, not a layer of the server: it shares
only the server's core, store and net helpers, never the guard's or an endpoint's code
(main.c, at the top, starts either).

No server is started; the test reads the tree.
"""

import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ORDER = ["core", "store", "net", "guard", "api", "top"]
# Modules with a header and no .c file, by layer.
HEADER_ONLY = {"container": "core", "dlist": "core", "metrics": "core", "store": "store", "election": "store",
               "api": "api", "cli": "cli"}
CONTEXT = {"server", "request", "config"}
CLI_MAY_USE = {"core", "store", "net", "cli"}


def modules():
    layer = {}
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith(".c"):
                rel = os.path.relpath(d, os.path.join(ROOT, "src"))
                layer[f[:-2]] = "top" if rel == "." else rel
    layer.update(HEADER_ONLY)
    return layer


def includes():
    """(path, module, included module) for every #include "leasegate/...". """
    for top in ("src", "include"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    path = os.path.join(d, f)
                    with open(path, errors="replace") as fh:
                        for inc in re.findall(r'#\s*include\s+"leasegate/([^"]+)\.h"', fh.read()):
                            yield os.path.relpath(path, ROOT), f[:-2], inc


class LayerTest(unittest.TestCase):
    def test_every_module_has_a_layer(self):
        layer = modules()
        for h in os.listdir(os.path.join(ROOT, "include", "leasegate")):
            if h.endswith(".h"):
                self.assertIn(h[:-2], set(layer) | CONTEXT, "include/leasegate/%s has no .c and no layer here" % h)

    def test_no_include_reaches_up(self):
        layer = modules()
        bad = []
        for path, mod, inc in includes():
            if inc == mod or inc in CONTEXT or mod in CONTEXT or inc not in layer:
                continue
            src, dst = layer[mod], layer[inc]
            if src == "cli":
                if dst not in CLI_MAY_USE:
                    bad.append("%s (the CLI) includes %s.h (%s)" % (path, inc, dst))
            elif (dst == "cli" and src != "top") or (dst != "cli" and ORDER.index(dst) > ORDER.index(src)):
                bad.append("%s (%s) includes %s.h (%s)" % (path, src, inc, dst))
        self.assertEqual(bad, [], "includes against docs/layout.md's rule:\n  " + "\n  ".join(bad))

    def test_the_check_sees_a_violation(self):
        """The rule's own check: a core header including an api one is caught."""
        layer = modules()
        self.assertEqual(layer.get("locktab"), "core")
        self.assertEqual(layer.get("dispatch"), "api")
        self.assertGreater(ORDER.index(layer["dispatch"]), ORDER.index(layer["locktab"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
