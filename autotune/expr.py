"""Small, safe arithmetic expressions for search-space files.

Bounds and rules in `search_spaces/*.yaml` are written as Python-like
expressions over parameter names (`min(64, speculative_num_steps * 2 + 1)`).
They are parsed once with `ast` and evaluated by walking the tree, so a YAML
file can never run code.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "round": round}


class ExprError(ValueError):
    """The expression is not valid; the message says why."""


@dataclass(frozen=True)
class Expr:
    source: str
    tree: ast.expr
    names: frozenset[str]

    def __call__(self, env: Mapping[str, Any]) -> Any:
        return _eval(self.tree, env)


def parse(source: str | int | float, allowed_names: set[str] | frozenset[str]) -> Expr:
    """Parse `source` and check it only uses `allowed_names` and supported syntax."""
    text = str(source).strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in allowed_names and node.id not in _FUNCTIONS:
                raise ExprError(f"unknown name {node.id!r} in expression {text!r}")
            names.add(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
                raise ExprError(f"only min/max/abs/round may be called in {text!r}")
            if node.keywords:
                raise ExprError(f"keyword arguments are not allowed in {text!r}")
        elif not isinstance(
            node,
            (
                ast.Constant,
                ast.BinOp,
                ast.UnaryOp,
                ast.BoolOp,
                ast.Compare,
                ast.IfExp,
                ast.Tuple,
                ast.List,
                ast.Load,
                ast.operator,
                ast.unaryop,
                ast.boolop,
                ast.cmpop,
            ),
        ):
            raise ExprError(f"unsupported syntax {type(node).__name__} in {text!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
            raise ExprError(f"unsupported constant {node.value!r} in {text!r}")
    return Expr(text, tree, frozenset(names - set(_FUNCTIONS)))


def _eval(node: ast.expr, env: Mapping[str, Any]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Name(id=name):
            return env[name]
        case ast.BinOp(left=left, op=op, right=right):
            return _BINARY[type(op)](_eval(left, env), _eval(right, env))
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand, env)
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _eval(operand, env)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return not _eval(operand, env)
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(v, env) for v in values)
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(v, env) for v in values)
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            lhs = _eval(left, env)
            for op, comp in zip(ops, comparators, strict=True):
                rhs = _eval(comp, env)
                if not _COMPARE[type(op)](lhs, rhs):
                    return False
                lhs = rhs
            return True
        case ast.Tuple(elts=elts) | ast.List(elts=elts):
            # Only as the right side of `in` (`spec_type in ('ngram-mod', 'ngram-simple')`).
            return tuple(_eval(e, env) for e in elts)
        case ast.IfExp(test=test, body=body, orelse=orelse):
            return _eval(body, env) if _eval(test, env) else _eval(orelse, env)
        case ast.Call(func=ast.Name(id=fname), args=args):
            return _FUNCTIONS[fname](*(_eval(a, env) for a in args))
    raise ExprError(f"unsupported expression {ast.unparse(node)!r}")
