"""The package's size rules (docs/development.md): rooms small enough to read.

No module over MAX_MODULE_LINES lines, no function over MAX_FUNCTION_LINES lines (from
its `def` to its last line), and at most MAX_WIDE_FUNCTIONS functions with
WIDE_PARAMETERS or more parameters (self and cls not counted). Past these limits a
module holds more than one concept, a function more than a reader can hold in mind, and
a long parameter list is a record that wants a name.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxrl_async"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
WIDE_PARAMETERS = 7
MAX_WIDE_FUNCTIONS = 5


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameters(node) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    count = len(names) + (args.vararg is not None) + (args.kwarg is not None)
    return count - (names[:1] in (["self"], ["cls"]))


def _where(path: Path, node=None) -> str:
    rel = path.relative_to(PACKAGE.parent)
    return f"{rel}" if node is None else f"{rel}:{node.lineno} {node.name}"


def test_the_rules_see_the_package():
    assert len(_modules()) > 20
    assert sum(1 for path in _modules() for _ in _functions(path)) > 200


def test_no_module_is_longer_than_the_limit():
    long = [
        f"{_where(p)} ({n} lines)"
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, long


def test_no_function_is_longer_than_the_limit():
    long = [
        f"{_where(p, f)} ({f.end_lineno - f.lineno + 1} lines)"
        for p in _modules()
        for f in _functions(p)
        if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_few_functions_take_many_parameters():
    wide = [
        f"{_where(p, f)} ({_parameters(f)})"
        for p in _modules()
        for f in _functions(p)
        if _parameters(f) >= WIDE_PARAMETERS
    ]
    assert len(wide) <= MAX_WIDE_FUNCTIONS, wide


def test_parameters_are_counted_as_the_rule_says():
    source = "def f(self, a, /, b, *args, c, **kw): pass\ndef g(x, y=1): pass\n"
    f, g = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    assert _parameters(f) == 5 and _parameters(g) == 2
