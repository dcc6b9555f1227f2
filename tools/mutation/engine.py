"""A small mutation tester: ast mutants, applied in memory in a forked child, judged by pytest.

Why not a tool from PyPI (see tools/mutation/README.md): cosmic-ray rewrites the source file on disk for
every mutant, and this working tree is shared by engineers running tests at the same time; mutmut 3
copies the project into mutants/ and routes every function through a trampoline, picks tests by
coverage rather than by a module's own unit tests, and has no time bound for a run. This one never
writes a source file, runs each module against the test files named for it, one mutant at a time, with
a per-mutant timeout and a per-module time budget.

How a mutant runs. The parent has imported the target module. For each mutant it forks; the child
compiles the mutated module, executes it in a scratch namespace, and copies what changed into the live
module: a function's or method's code object and defaults (so every reference to it, including
`from module import name` elsewhere, sees the mutant), or a module-level number (also replaced in every
module that imported it under the same name). Then the child runs pytest on the module's tests and exits
with pytest's code. Exit 0 is a surviving mutant; a failing test or a timeout kills it. A module that does
not load, or tests that are not collected, are an error: reported apart, never a kill, since no test
judged the mutant (a run against a tree being rebased used to count those as kills; __main__ now runs
on a copy, snapshot.py).

What is mutated: function and method bodies and their default values, and module-level constant
assignments (`NAME = <numbers and operators>`). Not mutated: strings (messages and struct formats: the
layout tests pin the formats byte for byte), class bodies other than methods, annotations, docstrings,
and logging calls (`log.warning(...)` etc.), whose effect is a log line.
"""

from __future__ import annotations

import ast
import builtins
import copy
import gc
import importlib
import os
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass, field

LOG_NAMES = {"log", "logger", "logging"}
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}

_CMP_SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BIN_SWAP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}
_SYM = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass
class Mutant:
    module: str  # dotted module name
    path: str  # source path relative to the project root
    index: int  # position in the module's mutant list (stable for a given source)
    lineno: int
    col: int
    function: str  # qualified name of the enclosing function, or "<module>"
    line: str  # the source line, stripped
    mutation: str  # what changes, e.g. "< -> <=", "127 -> 128", "stmt -> pass"
    occurrence: int = 1  # 1 unless the same mutation appears more than once on the line
    equivalent: str = ""  # the reviewed reason, when marked equivalent
    # lines whose execution lets the mutant act (its node's; a default value's: its function's); None:
    # a module-level constant, read wherever its name is used (reach.py)
    span: tuple[int, int] | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}:{self.col}"

    def describe(self) -> str:
        occ = f" (#{self.occurrence})" if self.occurrence > 1 else ""
        return f"{self.where} {self.function}: {self.mutation}{occ}   | {self.line}"


@dataclass
class Result:
    mutant: Mutant
    outcome: str  # killed | timeout | survived | error(...): never judged (ERRORS, incompatible, not applied)
    seconds: float = 0.0


# -- finding and applying mutations -----------------------------------------------------------------


class _Mutator(ast.NodeTransformer):
    """Walks a module in a fixed order, numbering mutation points. With target=i it applies the i-th."""

    def __init__(self, target: int = -1):
        self.target = target
        self.count = 0
        # (node, function qualname, description, span: see Mutant.span)
        self.points: list[tuple[ast.AST, str, str, tuple[int, int] | None]] = []
        self.applied = False
        self._scope: list[str] = []
        self._in_function = 0
        self._span_of: tuple[int, int] | None = None  # a function's lines, while its defaults are visited
        self._module_level = False

    # ---- bookkeeping
    def _point(self, node, desc: str) -> bool:
        """Register a mutation point; True when it is the one to apply."""
        i = self.count
        self.count += 1
        span = None if self._module_level else self._span_of or (node.lineno, node.end_lineno or node.lineno)
        self.points.append((node, ".".join(self._scope) or "<module>", desc, span))
        if i == self.target:
            self.applied = True
            return True
        return False

    @property
    def _active(self) -> bool:
        return self._in_function > 0

    # ---- scopes
    def visit_Module(self, node):
        body = []
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body.append(self.visit(stmt))
            elif _is_constant_assignment(stmt):
                self._in_function += 1  # constant expressions at module level are mutated too
                self._scope.append(stmt.targets[0].id)
                self._module_level = True
                stmt.value = self.visit(stmt.value)
                self._module_level = False
                self._scope.pop()
                self._in_function -= 1
                body.append(stmt)
            else:
                body.append(stmt)
        node.body = body
        return node

    def visit_ClassDef(self, node):
        self._scope.append(node.name)
        node.body = [
            self.visit(s) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else s
            for s in node.body
        ]
        self._scope.pop()
        return node

    def visit_FunctionDef(self, node):
        self._scope.append(node.name)
        self._in_function += 1
        # defaults are mutated (evaluated at definition time, copied into the live function): one acts
        # wherever the function runs, that is where its body runs (its def line also runs at import)
        outer, self._span_of = self._span_of, (node.body[0].lineno, node.end_lineno or node.lineno)
        node.args.defaults = [self.visit(d) for d in node.args.defaults]
        node.args.kw_defaults = [self.visit(d) if d is not None else None for d in node.args.kw_defaults]
        self._span_of = outer
        body = node.body
        start = 1 if body and _is_docstring(body[0]) else 0
        node.body = body[:start] + self._statements(body[start:])
        self._in_function -= 1
        self._scope.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        node.body = self.visit(node.body)
        return node

    def _statements(self, stmts):
        out = []
        for s in stmts:
            r = self.visit(s)
            if isinstance(r, list):
                out.extend(r)
            elif r is not None:
                out.append(r)
        return out or ([ast.Pass()] if stmts else [])

    # ---- what is not mutated
    def visit_JoinedStr(self, node):
        return node

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Assert(self, node):
        node.test = self.visit(node.test)
        return node

    # ---- statements
    def generic_visit_block(self, node):
        for name in ("body", "orelse", "finalbody"):
            if hasattr(node, name):
                setattr(node, name, self._statements(getattr(node, name)))
        if hasattr(node, "handlers"):
            node.handlers = [self.visit(h) for h in node.handlers]
        return node

    def visit_If(self, node):
        node.test = self._condition(node.test)
        return self.generic_visit_block(node)

    def visit_While(self, node):
        node.test = self._condition(node.test)
        return self.generic_visit_block(node)

    def visit_For(self, node):
        node.iter = self.visit(node.iter)
        return self.generic_visit_block(node)

    def visit_With(self, node):
        node.items = [self.visit(i) for i in node.items]
        return self.generic_visit_block(node)

    def visit_Try(self, node):
        return self.generic_visit_block(node)

    def visit_ExceptHandler(self, node):
        node.body = self._statements(node.body)
        return node

    def _condition(self, test):
        if self._active and not isinstance(test, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Constant)):
            if self._point(test, "cond -> not cond"):
                return ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=test), test)
        return self.visit(test)

    def visit_IfExp(self, node):
        node.test = self._condition(node.test)
        node.body = self.visit(node.body)
        node.orelse = self.visit(node.orelse)
        return node

    def visit_Expr(self, node):
        if _is_log_call(node.value):
            return node
        if self._active and isinstance(node.value, ast.Call):
            if self._point(node, "stmt -> pass"):
                return ast.copy_location(ast.Pass(), node)
        node.value = self.visit(node.value)
        return node

    def visit_Assign(self, node):
        if (
            self._active
            and self._in_function
            and any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets)
        ):
            if self._point(node, "stmt -> pass"):
                return ast.copy_location(ast.Pass(), node)
        node.value = self.visit(node.value)
        return node

    def visit_AugAssign(self, node):
        swap = _BIN_SWAP.get(type(node.op))
        if self._active and swap is not None:
            if self._point(node, f"{_SYM[type(node.op)]}= -> {_SYM[swap]}="):
                node.op = swap()
                return node
        node.value = self.visit(node.value)
        return node

    def visit_Return(self, node):
        if (
            self._active
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            if self._point(node, "return x -> return None"):
                node.value = ast.Constant(value=None)
                return node
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Break(self, node):
        if self._active and self._point(node, "break -> continue"):
            return ast.copy_location(ast.Continue(), node)
        return node

    def visit_Continue(self, node):
        if self._active and self._point(node, "continue -> break"):
            return ast.copy_location(ast.Break(), node)
        return node

    # ---- expressions
    def visit_Call(self, node):
        if _is_log_call(node):
            return node
        if self._active and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            other = "max" if node.func.id == "min" else "min"
            if self._point(node, f"{node.func.id}() -> {other}()"):
                node.func = ast.copy_location(ast.Name(id=other, ctx=ast.Load()), node.func)
                return node
        node.func = self.visit(node.func)
        node.args = [self.visit(a) for a in node.args]
        node.keywords = [self.visit(k) for k in node.keywords]
        return node

    def visit_Compare(self, node):
        if self._active:
            for i, op in enumerate(node.ops):
                swap = _CMP_SWAP.get(type(op))
                if swap is not None and self._point(node, f"{_SYM[type(op)]} -> {_SYM[swap]}"):
                    node.ops[i] = swap()
                    return node
        node.left = self.visit(node.left)
        node.comparators = [self.visit(c) for c in node.comparators]
        return node

    def visit_BinOp(self, node):
        swap = _BIN_SWAP.get(type(node.op))
        if self._active and swap is not None and not _is_string_format(node):
            if self._point(node, f"{_SYM[type(node.op)]} -> {_SYM[swap]}"):
                node.op = swap()
                return node
        node.left = self.visit(node.left)
        node.right = self.visit(node.right)
        return node

    def visit_BoolOp(self, node):
        if self._active:
            swap = ast.Or if isinstance(node.op, ast.And) else ast.And
            if self._point(node, f"{_SYM[type(node.op)]} -> {_SYM[swap]}"):
                node.op = swap()
                return node
        node.values = [self.visit(v) for v in node.values]
        return node

    def visit_UnaryOp(self, node):
        if self._active and isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
            name = {ast.Not: "not x -> x", ast.USub: "-x -> x", ast.Invert: "~x -> x"}[type(node.op)]
            if self._point(node, name):
                return node.operand
        node.operand = self.visit(node.operand)
        return node

    def visit_Constant(self, node):
        if not self._active:
            return node
        v = node.value
        if isinstance(v, bool):
            if self._point(node, f"{v} -> {not v}"):
                return ast.copy_location(ast.Constant(value=not v), node)
        elif isinstance(v, int):
            if self._point(node, f"{v} -> {v + 1}"):
                return ast.copy_location(ast.Constant(value=v + 1), node)
        elif isinstance(v, float):
            if self._point(node, f"{v} -> {v + 1.0}"):
                return ast.copy_location(ast.Constant(value=v + 1.0), node)
        return node


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_log_call(node) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    f = node.func
    return f.attr in LOG_METHODS and isinstance(f.value, ast.Name) and f.value.id in LOG_NAMES


def _is_string_format(node: ast.BinOp) -> bool:
    """ "..." % args and "a" + "b": message text, not behaviour."""
    return isinstance(node.left, ast.Constant) and isinstance(node.left.value, (str, bytes))


def _is_constant_assignment(stmt) -> bool:
    """NAME = an expression of numbers and operators only (no names, calls or strings)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    for n in ast.walk(stmt.value):
        if isinstance(n, ast.Constant):
            if not isinstance(n.value, (int, float)):
                return False
        elif not isinstance(n, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)):
            return False
    return True


def find_mutants(module: str, root: str) -> tuple[list[Mutant], str]:
    """Every mutant of a module, in a stable order, and the module's source."""
    path = module_path(module, root)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    m = _Mutator()
    m.visit(ast.parse(source, path))
    lines = source.splitlines()
    rel = os.path.relpath(path, root)
    out, seen = [], {}
    for i, (node, fn, desc, span) in enumerate(m.points):
        line = lines[node.lineno - 1].strip()
        k = (fn, line, desc)
        seen[k] = seen.get(k, 0) + 1
        out.append(Mutant(module, rel, i, node.lineno, node.col_offset, fn, line, desc, seen[k], span=span))
    return out, source


def mutated_tree(source: str, path: str, index: int) -> ast.Module:
    m = _Mutator(index)
    tree = m.visit(ast.parse(source, path))
    if not m.applied:
        raise LookupError(f"mutant {index} not found in {path}")
    return ast.fix_missing_locations(tree)


def module_path(module: str, root: str) -> str:
    return os.path.join(root, *module.split(".")) + ".py"


# -- putting a mutant into the live module (in the child) ----------------------------------------------


class Incompatible(Exception):
    """The mutated function cannot replace the live one in place (its closure changed)."""


_SIMPLE = (int, float, bool, str, bytes)
_CONTAINERS = (dict, list, tuple, set, frozenset)
_MISSING = object()


def _plain(v) -> bool:
    """A value a mutant can make (numbers, text, None and containers of them): no identity of its own."""
    if v is None or isinstance(v, _SIMPLE):
        return True
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return isinstance(v, (tuple, list, set, frozenset)) and all(_plain(x) for x in v)


def _merged(old, new):
    """The mutated function's default values, except where the mutated module built an object of its own
    (a sentinel `_UNSET = object()`): the live one stays, or the live code's `x is _UNSET` fails, a kill
    the mutant did not make."""
    if old is None or new is None:
        return new
    if isinstance(old, dict):
        return {k: v if _plain(v) or k not in old else old[k] for k, v in new.items()}
    if len(old) != len(new):
        return new
    return tuple(n if _plain(n) else o for o, n in zip(old, new))


def _identical(a, b) -> bool:
    """Equal, and of the same types (6 == 6.0, but `6 // 1` -> `6 / 1` is a mutant of a default value)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _patch_function(old, new, owner=None, name=None) -> int:
    defaults = _merged(old.__defaults__, new.__defaults__)
    kwdefaults = _merged(old.__kwdefaults__, new.__kwdefaults__)
    if (
        old.__code__ == new.__code__
        and _identical(old.__defaults__, defaults)
        and _identical(old.__kwdefaults__, kwdefaults)
    ):
        return 0
    if old.__code__.co_freevars != new.__code__.co_freevars:
        # e.g. a method whose super() call was removed: no __class__ cell any more. A method is found
        # through its class, so the class gets the new function; anything else cannot be patched.
        if isinstance(owner, type) and new.__code__.co_freevars == ():
            setattr(owner, name, new)
            return 1
        raise Incompatible(f"{old.__qualname__}: closure changed")
    _nested_changes(old.__code__, new.__code__)
    old.__code__ = new.__code__
    old.__defaults__ = defaults
    old.__kwdefaults__ = kwdefaults
    return 1


# nested functions whose code the mutant changed: id(old code) -> (old code, new code). A closure made
# before the mutant was applied (a table of actions built at import by a factory function) keeps its own
# code object; apply() swaps it in every such closure.
_NESTED: dict[int, tuple[types.CodeType, types.CodeType]] = {}


def _nested_changes(old: types.CodeType, new: types.CodeType) -> None:
    inner = [(a, b) for a, b in zip(old.co_consts, new.co_consts) if isinstance(a, types.CodeType)]
    for a, b in inner:
        if isinstance(b, types.CodeType) and a != b:
            _NESTED[id(a)] = (a, b)
            _nested_changes(a, b)


def _patch_closures() -> int:
    n = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and id(obj.__code__) in _NESTED:
            a, b = _NESTED[id(obj.__code__)]
            if obj.__code__ is not a:
                continue
            if a.co_freevars == b.co_freevars:
                obj.__code__ = b
                n += 1
            elif set(b.co_freevars) <= set(a.co_freevars):  # the mutant no longer uses a variable
                n += _replace_closure(obj, b)
    return n


def _replace_closure(old: types.FunctionType, code: types.CodeType) -> int:
    """A closure whose mutated code uses fewer variables cannot take the code in place: a new function
    over the same cells replaces it in every dict and list that holds it (a frozen dataclass's too)."""
    cells = dict(zip(old.__code__.co_freevars, old.__closure__ or ()))
    new = types.FunctionType(
        code, old.__globals__, old.__name__, old.__defaults__, tuple(cells[v] for v in code.co_freevars)
    )
    new.__kwdefaults__, new.__qualname__ = old.__kwdefaults__, old.__qualname__
    n = 0
    for holder in gc.get_referrers(old):
        if isinstance(holder, dict):
            for k in [k for k, v in holder.items() if v is old]:
                holder[k] = new
                n += 1
        elif isinstance(holder, list):
            for i in [i for i, v in enumerate(holder) if v is old]:
                holder[i] = new
                n += 1
        elif isinstance(getattr(holder, "__dict__", None), dict):  # an instance's attributes (3.11 keeps
            for k in [k for k, v in vars(holder).items() if v is old]:  # them without a dict until asked)
                object.__setattr__(holder, k, new)
                n += 1
    return n


def _patch_member(old, new, seen, owner=None, name=None) -> int:
    if id(old) in seen:
        return 0
    seen.add(id(old))
    if isinstance(old, types.FunctionType) and isinstance(new, types.FunctionType):
        n = _patch_function(old, new, owner, name)
        # a wrapping decorator (inlineCallbacks, contextmanager, functools.wraps): the wrapper's code is
        # the decorator's, the same for every function it wraps; the module's function is in its closure
        inner, mutated = getattr(old, "__wrapped__", None), getattr(new, "__wrapped__", None)
        if inner is not None and mutated is not None:
            n += _patch_member(inner, mutated, seen)
        return n
    if hasattr(old, "__wrapped__") and hasattr(new, "__wrapped__") and hasattr(old, "cache_clear"):
        n = _patch_member(old.__wrapped__, new.__wrapped__, seen)
        old.cache_clear()
        return n
    if isinstance(old, property) and isinstance(new, property):
        return sum(
            _patch_member(a, b, seen)
            for a, b in ((old.fget, new.fget), (old.fset, new.fset), (old.fdel, new.fdel))
            if a is not None and b is not None
        )
    if isinstance(old, (staticmethod, classmethod)) and isinstance(new, type(old)):
        return _patch_member(old.__func__, new.__func__, seen)
    if isinstance(old, type) and isinstance(new, type):
        n = 0
        for name, value in new.__dict__.items():
            cur = old.__dict__.get(name, _MISSING)
            if cur is not _MISSING:
                n += _patch_member(cur, value, seen, old, name)
        return n
    return 0


def _scratch(mod) -> dict:
    return {
        "__name__": mod.__name__,
        "__package__": mod.__package__,
        "__file__": mod.__file__,
        "__builtins__": builtins,
    }


def _compile(tree_or_source, path: str):
    """The module's code, with the module's own future flags only (never this file's `from __future__
    import annotations`: every function of a module without it would differ, and its annotations change)."""
    return compile(tree_or_source, path, "exec", dont_inherit=True)


def _same(a, b, depth: int = 0) -> bool:
    """Whether two values built by two executions of the module are alike: the same code with alike cells
    and defaults, classes of one name, alike items and attributes (a value built at import by the original
    module and by the mutated one)."""
    if a is b:
        return True
    if depth > 20 or type(a).__qualname__ != type(b).__qualname__:
        return False
    if isinstance(a, types.FunctionType):
        cells_a = [c.cell_contents for c in a.__closure__ or () if _filled(c)]
        cells_b = [c.cell_contents for c in b.__closure__ or () if _filled(c)]
        return (
            a.__code__ == b.__code__
            and _same(a.__defaults__, b.__defaults__, depth + 1)
            and _same(cells_a, cells_b, depth + 1)
        )
    if isinstance(a, type):
        return a.__qualname__ == b.__qualname__ and a.__module__ == b.__module__
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            _same(ka, kb, depth + 1) and _same(va, vb, depth + 1) for (ka, va), (kb, vb) in zip(a.items(), b.items())
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(_same(x, y, depth + 1) for y in b) for x in a)
    try:
        if a == b:
            return True
    except Exception:
        return False
    if type(a).__module__ == type(b).__module__ and hasattr(a, "__dict__") and hasattr(b, "__dict__"):
        return _same(vars(a), vars(b), depth + 1)  # instances of the module's classes from both runs
    return False


def _filled(cell) -> bool:
    """Whether a closure cell holds a value (a variable assigned after the closure was made may not)."""
    try:
        return cell.cell_contents is not _MISSING
    except ValueError:
        return False


class _Rebinder:
    """A container the mutated module built, made to live in the live module: its classes and functions
    by their live counterparts (already patched), its closures over the live module's globals."""

    def __init__(self, mod, ns: dict):
        self.mod, self.ns = mod, ns
        self.live = {
            id(v): mod.__dict__[k]
            for k, v in ns.items()
            if not k.startswith("__")
            and isinstance(v, (type, types.FunctionType))
            and isinstance(mod.__dict__.get(k), type(v))
        }
        self.done: dict[int, object] = {}

    def __call__(self, v):
        if id(v) in self.live:
            return self.live[id(v)]
        if id(v) in self.done:
            return self.done[id(v)]
        if isinstance(v, types.FunctionType) and v.__globals__ is self.ns:
            for c in v.__closure__ or ():
                if _filled(c):
                    c.cell_contents = self(c.cell_contents)
            out = types.FunctionType(v.__code__, self.mod.__dict__, v.__name__, v.__defaults__, v.__closure__)
            out.__kwdefaults__, out.__qualname__ = v.__kwdefaults__, v.__qualname__
            out.__dict__.update(v.__dict__)
        elif type(v) is dict:
            out = {self(k): self(x) for k, x in v.items()}
        elif type(v) in (list, tuple, set, frozenset):
            out = type(v)(self(x) for x in v)
        else:
            return v
        self.done[id(v)] = out
        return out


def apply(mod, tree: ast.Module, rebind: bool = False) -> int:
    """Execute the mutated module beside the live one and copy what differs into it. Returns how many
    functions and values were replaced. rebind: a mutant of code that ran at import; each module-level
    container the mutated module builds unlike the original module does (a table of actions built by a
    factory) replaces the live one, its classes and functions the live ones and its closures over the live
    module's globals (a container alike in both, such as a tuple of the module's own classes, stays: a new
    copy of a class would fail every isinstance and except of the live code, a kill the mutant did not make)."""
    ns = _scratch(mod)
    exec(_compile(tree, mod.__file__), ns)
    original: dict = {}
    if rebind:
        original = _scratch(mod)
        with open(mod.__file__, encoding="utf-8") as f:
            exec(_compile(f.read(), mod.__file__), original)
    changed, seen = 0, set()
    containers = []
    for name, new in ns.items():
        old = mod.__dict__.get(name, _MISSING)
        if old is _MISSING or name.startswith("__"):
            continue
        if isinstance(old, _SIMPLE) and isinstance(new, _SIMPLE):
            if type(old) is type(new) and old == new:
                continue
            changed += _set(mod, name, old, new)
        elif rebind and isinstance(old, _CONTAINERS):
            if not _same(original.get(name, _MISSING), new):
                containers.append((name, old, new))
        elif getattr(old, "__module__", None) == mod.__name__ or isinstance(old, types.FunctionType):
            changed += _patch_member(old, new, seen)
    if containers:
        live = _Rebinder(mod, ns)  # after the patches: the live functions and classes carry the mutant
        for name, old, new in containers:
            changed += _set(mod, name, old, live(new))
    if _NESTED:
        changed += _patch_closures()
    return changed


def _set(mod, name: str, old, new) -> int:
    for other in list(sys.modules.values()):  # `from module import NAME` copies the value
        if other is not None and other is not mod and getattr(other, name, _MISSING) is old:
            setattr(other, name, new)
    setattr(mod, name, new)
    return 1


# -- running ---------------------------------------------------------------------------------------

EXIT_INCOMPATIBLE = 97
EXIT_NOT_APPLIED = 98
EXIT_IMPORT = 96  # the module, or the mutated module, failed to load: the mutant was never judged
EXIT_WRONG_TREE = 95  # the module was found outside the run's tree (a stale sys.path): nothing judged

# pytest's exit codes that mean the tests did not run to a verdict: collection failed (an import error in
# a test file, or the mutant broke one: 2), pytest itself failed (3), the arguments were wrong (4), or no
# test was found (5). None of them is a kill: a test that fails is exit 1, even with -x.
PYTEST_ERRORS = {2: "error(collection)", 3: "error(pytest internal)", 4: "error(pytest usage)", 5: "error(no tests)"}
ERRORS = {
    EXIT_IMPORT: "error(import)",
    EXIT_WRONG_TREE: "error(module outside the tree)",
    **PYTEST_ERRORS,
}


def pytest_args(tests: list[str], root: str) -> list[str]:
    return [
        "-x",
        "-q",
        "--no-header",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-p",
        "no:timeout",
        "-p",
        "no:randomly",
        "--rootdir",
        root,
        "-o",
        "addopts=",
        "-W",
        "ignore",
        *tests,
    ]


def _debug(what: str) -> None:
    if os.environ.get("MUTATION_DEBUG"):
        import traceback

        with open(os.environ["MUTATION_DEBUG"], "a") as f:
            f.write(f"--- {what}\n")
            traceback.print_exc(file=f)


def _inside(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _child(
    module: str,
    tree: ast.Module | None,
    tests: list[str],
    root: str,
    record: str | None,
    select: list[str] | None,
    rebind: bool = False,
) -> int:
    """In the forked child: load the module from root, apply the mutant, run pytest (recording which
    lines each test reaches into `record`, or running only the tests `select`). Returns the exit code."""
    try:
        mod = importlib.import_module(module)
        if tree is not None:
            if not apply(mod, tree, rebind):
                return EXIT_NOT_APPLIED
    except Incompatible:
        return EXIT_INCOMPATIBLE
    except BaseException:  # the module, or the mutated module, does not load: no test said anything
        _debug(f"{module}: import")
        return EXIT_IMPORT
    if not _inside(mod.__file__, root):
        return EXIT_WRONG_TREE
    try:
        import pytest

        from . import reach

        plugins: list[object] = []
        if record is not None:
            recorder = reach.Recorder(mod.__file__)
            plugins.append(recorder)
            recorder.start()
        if select is not None:
            plugins.append(reach.Select(select))
        code = int(pytest.main(pytest_args(tests, root), plugins=plugins))
        if record is not None:
            sys.settrace(None)
            recorder.save(record)
        return code
    except BaseException:  # pytest itself broke (a failing test never gets here): not a verdict
        _debug(f"{module}: pytest")
        return 3


def preload(module: str, root: str) -> set[int]:
    """Import the module (and pytest) once in the parent: every forked child then starts with it loaded
    instead of importing it (and Twisted) again, ~0.5 s a mutant. The child still checks where it came
    from. Returns the module's lines that ran while it was imported (reach.py: a function that only runs
    then, such as a factory building a table, is reached by no test; empty when it was already loaded)."""
    import pytest  # noqa: F401

    from . import reach

    rec = reach.Recorder(module_path(module, root))
    first = module not in sys.modules
    try:
        if first:
            rec.start()
        mod = importlib.import_module(module)
    except Exception as e:
        raise SystemExit(f"{module}: does not import ({type(e).__name__}: {e}); fix that first") from e
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    if not _inside(mod.__file__, root):
        raise SystemExit(f"{module}: imported from {mod.__file__}, not from the run's tree {root}")
    return rec.hits.get(reach.COLLECTION, set())


def run_child(
    module: str,
    tree: ast.Module | None,
    tests: list[str],
    root: str,
    timeout: float,
    *,
    record: str | None = None,
    select: list[str] | None = None,
    rebind: bool = False,
) -> tuple[str, float]:
    """Fork; in the child apply the mutant (None: none) and run pytest. (outcome, seconds).
    record: a file for the lines each test reaches (reach.Recorder); select: only these test ids.

    outcome: survived (exit 0), killed (tests failed, or the child died), timeout, or error(...): the
    module did not load or the tests were not collected (ERRORS), the mutated function cannot replace the
    live one (incompatible), or the mutant changed no live code (not applied). An error is never scored."""
    started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = EXIT_IMPORT
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            sys.stdout = sys.stderr = open(os.devnull, "w")
            os.setpgid(0, 0)
            code = _child(module, tree, tests, root, record, select, rebind)
        finally:
            os._exit(code)
    deadline = started + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - started
        time.sleep(0.005)
    seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return "survived", seconds
    if code == EXIT_INCOMPATIBLE:
        return "error(incompatible)", seconds
    if code == EXIT_NOT_APPLIED:
        return "error(not applied)", seconds
    if code in ERRORS:
        return ERRORS[code], seconds
    return "killed", seconds  # test failures (exit 1), or the child died of a signal


def run_mutant(
    mutant: Mutant,
    source: str,
    tests: list[str],
    root: str,
    timeout: float,
    select: list[str] | None = None,
    rebind: bool = False,
) -> Result:
    path = module_path(mutant.module, root)
    tree = mutated_tree(source, path, mutant.index)
    _compile(tree, path)  # a mutant that does not compile is a bug of this tool: raise here
    outcome, seconds = run_child(mutant.module, tree, tests, root, timeout, select=select, rebind=rebind)
    return Result(mutant, outcome, seconds)


@dataclass
class ModuleReport:
    module: str
    path: str
    results: list[Result] = field(default_factory=list)
    equivalent: list[Mutant] = field(default_factory=list)
    not_run: list[Mutant] = field(default_factory=list)
    baseline_s: float = 0.0
    seconds: float = 0.0

    def count(self, *outcomes) -> int:
        return sum(1 for r in self.results if r.outcome in outcomes)

    @property
    def errors(self) -> list[Result]:
        """Mutants never judged: the module did not load or the tests were not collected (not scored)."""
        return [r for r in self.results if r.outcome.startswith("error")]

    @property
    def detected(self) -> int:
        return self.count("killed", "timeout")

    @property
    def scored(self) -> int:
        return self.count("killed", "timeout", "survived")

    @property
    def score(self) -> float:
        return 100.0 * self.detected / self.scored if self.scored else 100.0

    @property
    def survivors(self) -> list[Mutant]:
        return [r.mutant for r in self.results if r.outcome == "survived"]


def copy_tree(tree):
    return copy.deepcopy(tree)


def select(mutants: list[Mutant], function: str, line: str, mutation: str, occurrence: int = 1) -> Mutant:
    """The one mutant in `function` whose source line contains `line` and whose mutation is `mutation`."""
    hits = [
        m
        for m in mutants
        if m.function == function and line in m.line and m.mutation == mutation and m.occurrence == occurrence
    ]
    if len(hits) != 1:
        raise LookupError(f"{len(hits)} mutants match {function}: {mutation} | {line}")
    return hits[0]


def smoke(module: str, picks: list[tuple], root: str, timeout: float = 120.0) -> list[tuple[Mutant, str]]:
    """Run a few fixed mutants, each against the one test that should kill it (for `make test`).

    picks: (function, line substring, mutation, test node id relative to root). Raises if the tests do
    not pass unmutated. Returns (mutant, outcome) for each pick."""
    mutants, source = find_mutants(module, root)
    nodes = sorted({os.path.join(root, p[3]) for p in picks})
    outcome, _ = run_child(module, None, nodes, root, timeout)
    if outcome != "survived":
        raise AssertionError(f"{module}: the smoke tests do not pass unmutated ({outcome})")
    out = []
    for function, line, mutation, node in picks:
        m = select(mutants, function, line, mutation)
        out.append((m, run_mutant(m, source, [os.path.join(root, node)], root, timeout).outcome))
    return out
