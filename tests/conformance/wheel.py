"""Read a downloaded SGLang wheel as source text: strings, flags, routes, metric names.

Never imports sglang (it needs torch and a GPU): every answer comes from `ast` over the
files inside the zip, and says where it was found (`sglang/srt/...py:LINE`) so that a belief
the wheel contradicts fails with the place to read.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

# logging's `%d` / `%.2f` / `%s` placeholders read as `{}`, like an f-string's fields.
_PERCENT = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfigx]")


@dataclass(frozen=True)
class Flag:
    """One launch flag as the wheel's parser defines it."""

    name: str
    type: str  # "int", "float", "str", "bool" (store_true), "json" ...
    default: Any
    choices: tuple[str, ...] | None
    where: str


@dataclass(frozen=True)
class Found:
    text: str
    where: str


class Wheel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.dist, self.version = path.name.split("-")[:2]
        self.names = set(self.zip.namelist())

    def __repr__(self) -> str:
        return f"{self.dist}-{self.version}"

    def has(self, member: str) -> bool:
        return member in self.names

    def source(self, member: str) -> str:
        return self.zip.read(member).decode("utf-8")

    def files(self, prefix: str) -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(".py"))

    def tree(self, member: str) -> ast.Module:
        return _parse(self.path, member, self.source(member))

    # ------------------------------------------------------------------ strings
    def strings(self, member: str) -> list[Found]:
        """Every string literal of `member`, f-string fields and %-placeholders as `{}`."""
        out = []
        for node in ast.walk(self.tree(member)):
            text = _template(node)
            if text is not None:
                out.append(Found(text, f"{member}:{node.lineno}"))
        return out

    def find(self, template: str, member: str) -> Found | None:
        """The first string of `member` that contains `template` (None: not there)."""
        if not self.has(member):
            return None
        return next((s for s in self.strings(member) if template in s.text), None)

    def raises(self, member: str) -> list[tuple[str, str, ast.Raise]]:
        """(exception type, message template, node) of every `raise X("...")` in `member`."""
        out = []
        for node in ast.walk(self.tree(member)):
            if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
                continue
            func = node.exc.func
            kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if kind is None or not node.exc.args:
                continue
            message = _template(node.exc.args[0])
            if message is None and isinstance(node.exc.args[0], ast.Name):
                message = self._assigned(member, node.exc.args[0].id, node.lineno)
            if message is not None:
                out.append((kind, message, node))
        return out

    def _assigned(self, member: str, name: str, before: int) -> str | None:
        """The last string assigned to `name` above line `before` (`msg = "..."; raise X(msg)`)."""
        best: tuple[int, str] | None = None
        for node in ast.walk(self.tree(member)):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < before
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            ):
                text = _template(node.value)
                if text is not None and (best is None or node.lineno > best[0]):
                    best = (node.lineno, text)
        return None if best is None else best[1]

    # ------------------------------------------------------------------ flags
    @cached_property
    def flags(self) -> dict[str, Flag]:
        """Every launch flag: from `arg_groups/fields/*.py` (msgspec fields, 0.5.16 on) or
        from `ServerArgs.add_cli_args`' `parser.add_argument` calls (older builds)."""
        # 0.5.16-0.5.2x declare the msgspec fields in server_args.py itself.
        fields = [*self.files("sglang/srt/arg_groups/fields/"), "sglang/srt/server_args.py"]
        found: dict[str, Flag] = {}
        for member in fields:
            if self.has(member):
                for name, flag in _field_flags(member, self.tree(member)).items():
                    found.setdefault(name, flag)
        if self.has("sglang/srt/server_args.py"):
            tree = self.tree("sglang/srt/server_args.py")
            defaults = _dataclass_defaults(tree, "ServerArgs")
            for flag in _add_argument_flags("sglang/srt/server_args.py", tree, defaults):
                found.setdefault(flag.name, flag)
        return found

    # ------------------------------------------------------------------ HTTP
    @cached_property
    def routes(self) -> dict[str, str]:
        """Path -> where, for every route of `srt/entrypoints/http_server.py`."""
        member = "sglang/srt/entrypoints/http_server.py"
        out: dict[str, str] = {}
        for node in ast.walk(self.tree(member)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and isinstance(deco.func, ast.Attribute)
                    and deco.func.attr in ("get", "post", "put", "api_route")
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                ):
                    out.setdefault(str(deco.args[0].value), f"{member}:{deco.lineno}")
        # /metrics is a Starlette Mount of prometheus' ASGI app (srt/utils/common.py).
        common = "sglang/srt/utils/common.py"
        if self.has(common):
            for s in self.strings(common):
                if s.text == "/metrics":
                    out.setdefault("/metrics", s.where)
        return out

    def function(self, member: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for node in ast.walk(self.tree(member)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        return None

    # ------------------------------------------------------------------ metrics
    @cached_property
    def metrics(self) -> dict[str, str]:
        """Metric name -> where, for every `name="sglang:..."` in the metrics collectors."""
        out: dict[str, str] = {}
        members = [
            m
            for m in self.files("sglang/srt/")
            if "/metrics/" in m or "/observability/" in m or m.endswith("metrics_collector.py")
        ]
        for member in members:
            for node in ast.walk(self.tree(member)):
                if isinstance(node, ast.keyword) and node.arg == "name":
                    value = node.value
                    if isinstance(value, ast.Constant) and str(value.value).startswith("sglang:"):
                        out.setdefault(str(value.value), f"{member}:{value.lineno}")
        return out


@lru_cache(maxsize=512)
def _parse(path: Path, member: str, text: str) -> ast.Module:
    return ast.parse(text, filename=member)


def _template(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PERCENT.sub("{}", node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("{}")
        return _PERCENT.sub("{}", "".join(parts))
    return None


def _type_name(node: ast.AST | None) -> str:
    """`Optional[int]` -> "int"; `bool` -> "bool"; `Literal[...]` -> "str"."""
    if node is None:
        return "str"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        head = node.value.id if isinstance(node.value, ast.Name) else ""
        if head in ("Optional", "List", "list"):
            inner = _type_name(node.slice)
            return inner if head == "Optional" else f"list[{inner}]"
        if head == "Literal":
            return "str"
        return head or "str"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp):  # int | None
        for side in (node.left, node.right):
            name = _type_name(side)
            if name != "None":
                return name
    return ast.unparse(node)


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)


def _choices(node: ast.AST | None) -> tuple[str, ...] | None:
    value = _literal(node)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return None if node is None else (f"<{ast.unparse(node)}>",)


def _field_flags(member: str, tree: ast.Module) -> dict[str, Flag]:
    out = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            ann = stmt.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") == "A"):
                continue
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            kind, meta = parts[0], parts[1] if len(parts) > 1 else None
            keywords = {}
            if isinstance(meta, ast.Call):
                keywords = {k.arg: k.value for k in meta.keywords if k.arg}
            if _literal(keywords.get("no_cli")) is True:
                continue
            name = stmt.target.id
            cli = _literal(keywords.get("cli_name")) or "--" + name.replace("_", "-")
            choices = _choices(keywords.get("choices"))
            literal = isinstance(kind, ast.Subscript) and getattr(kind.value, "id", "") == "Literal"
            if choices is None and literal:
                choices = _choices(kind.slice)
            out[cli] = Flag(
                cli, _type_name(kind), _literal(stmt.value), choices, f"{member}:{stmt.lineno}"
            )
    return out


def _dataclass_defaults(tree: ast.Module, cls_name: str) -> dict[str, Any]:
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if cls.name == cls_name:
            return {
                s.target.id: _literal(s.value)
                for s in cls.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return {}


def _add_argument_flags(member: str, tree: ast.Module, defaults: dict[str, Any]) -> list[Flag]:
    out = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("--")
        ):
            continue
        name = str(node.args[0].value)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(keywords.get("action"))
        if action in ("store_true", "store_false"):
            kind = "bool"
        else:
            kind = _type_name(keywords.get("type"))
        default_node = keywords.get("default")
        if isinstance(default_node, ast.Attribute):
            default = defaults.get(default_node.attr)
        elif action == "store_true" and default_node is None:
            default = False
        else:
            default = _literal(default_node)
        out.append(
            Flag(name, kind, default, _choices(keywords.get("choices")), f"{member}:{node.lineno}")
        )
    return out
