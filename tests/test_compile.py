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

    FUNCTION_LINES = 80  # the longest function a product module or script may have

    def test_no_product_function_is_longer_than_80_lines(self):
        import ast
        long = []
        for path, kind in product_files():
            if kind == "bench":
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        node.end_lineno - node.lineno + 1 > self.FUNCTION_LINES:
                    long.append("%s:%d %s (%d lines)" % (os.path.basename(path), node.lineno, node.name,
                                                         node.end_lineno - node.lineno + 1))
        self.assertEqual(long, [], "split these functions")

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


def _anchors(path):
    """The anchors GitHub makes for a Markdown file's headings."""
    import re
    with open(path) as f:
        text = f.read()
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, re.M)}


class DocsTest(unittest.TestCase):
    """The shape the docs keep: README at most 14 KB and DESIGN at most 20 KB (detail goes to the
    noun's document), every relative link and anchor in the project's Markdown resolves, and
    DESIGN's Files table names every product module and nothing that is gone."""

    LIMITS = {"README.md": 14000, "DESIGN.md": 20000}  # KB as 1,000 bytes: within either reading

    def test_readme_and_design_stay_small(self):
        for name, limit in self.LIMITS.items():
            with self.subTest(name=name):
                self.assertLessEqual(os.path.getsize(os.path.join(support.ROOT, name)), limit)

    def markdown(self):
        docs = os.path.join(support.ROOT, "docs")
        top = [os.path.join(support.ROOT, n) for n in sorted(os.listdir(support.ROOT)) if n.endswith(".md")]
        return top + [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]

    def test_every_link_resolves(self):
        import re
        for path in self.markdown():
            with open(path) as f:
                text = f.read()
            for link in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", link):
                    continue
                target, _, anchor = link.partition("#")
                target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
                with self.subTest(doc=os.path.relpath(path, support.ROOT), link=link):
                    self.assertTrue(os.path.exists(target), "no such file")
                    if anchor and target.endswith(".md"):
                        self.assertIn(anchor, _anchors(target))

    def test_design_files_table_names_every_module(self):
        import re
        with open(os.path.join(support.ROOT, "DESIGN.md")) as f:
            design = f.read()
        table = design.split("## Files", 1)[1].split("\n## ", 1)[0]
        named = set(re.findall(r"^\| `([^`]+)`", table, re.M))
        modules = {os.path.basename(p) for p, kind in product_files() if kind != "bench"}
        self.assertEqual(modules - named, set(), "product files DESIGN's Files table does not name")
        gone = {n for n in named if not os.path.exists(os.path.join(support.ROOT, n.split(",")[0]))}
        self.assertEqual(gone, set(), "DESIGN names files that are gone")


if __name__ == "__main__":
    unittest.main()
