"""Every product file compiles and imports on this interpreter.

The default `tests/run` runs the tests that drive jj on the default interpreter only; on the
oldest and newest interpreters it runs the rest and this check, so a syntax or an import that
one supported Python lacks (3.9 has no `match`, no `X | Y` annotations at run time) still fails
there. Product files: coord, install, every *.py at the top of the repository and the bench/
scripts (compiled: running them measures the machine).
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import unittest

import support


def product_files():
    """(path, kind) of every product file: 'module' (top-level *.py), 'script' (coord, install),
    'bench' (bench/ Python scripts)."""
    out = []
    for name in sorted(os.listdir(support.ROOT)):
        path = os.path.join(support.ROOT, name)
        if name.endswith(".py") and os.path.isfile(path):
            out.append((path, "module"))
        elif name in ("coord", "install"):
            out.append((path, "script"))
    bench = os.path.join(support.ROOT, "bench")
    for name in sorted(os.listdir(bench)) if os.path.isdir(bench) else ():
        path = os.path.join(bench, name)
        if not os.path.isfile(path):
            continue  # bench/__pycache__ after a bench script imported a sibling
        with open(path, "rb") as f:
            head = f.readline()
        if b"python" in head:
            out.append((path, "bench"))
    return out


class CompileTest(unittest.TestCase):

    def test_every_product_file_compiles(self):
        files = product_files()
        names = set(os.path.basename(p) for p, _ in files)
        self.assertTrue({"coord", "install", "store.py", "hook.py", "workspace.py"} <= names, sorted(names))
        self.assertTrue(any(kind == "bench" for _, kind in files), "no bench/ script found")
        for path, _kind in files:
            with self.subTest(path=os.path.relpath(path, support.ROOT)):
                with open(path, "rb") as f:
                    source = f.read()
                compile(source, path, "exec", dont_inherit=True)

    def test_every_module_and_script_imports(self):
        for path, kind in product_files():
            if kind == "bench":
                continue
            rel = os.path.relpath(path, support.ROOT)
            with self.subTest(path=rel):
                if kind == "module":
                    importlib.import_module(os.path.basename(path)[:-3])
                else:  # the scripts load as modules (their main() runs only as __main__)
                    name = "coord_compile_" + os.path.basename(path)
                    loader = importlib.machinery.SourceFileLoader(name, path)
                    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
                    loader.exec_module(module)
                    self.assertTrue(callable(getattr(module, "main", None)), "%s has no main()" % rel)
                    sys.modules.pop(name, None)


if __name__ == "__main__":
    unittest.main()
