"""Evaluate GitHub Actions ``${{ }}`` expressions, the subset a job's steps need.

Pure. No well-kept Python library evaluates them (GitHub's own evaluator is the npm
package ``@actions/expressions``; PyPI has only a tree-sitter grammar, which parses): this
is a small one for the documented subset, and an honest ``ExprError`` for the rest, never
a silent empty string. Supported: literals (``null``, ``true``, ``false``, numbers,
``'strings'``), context paths (``a.b``, ``a['b']``, ``a.*``), ``!``, ``<`` ``<=`` ``>``
``>=`` ``==`` ``!=`` ``&&`` ``||``, parentheses, and the functions ``contains``,
``startsWith``, ``endsWith``, ``format``, ``join``, ``toJSON``, ``fromJSON``,
``success``, ``always``, ``failure``, ``cancelled``.
Comparison and truthiness follow GitHub's rules (strings compared case-insensitively,
values of different types compared as numbers, ``&&`` and ``||`` return an operand).
https://docs.github.com/en/actions/reference/workflows-and-actions/expressions
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<num>0x[0-9a-fA-F]+|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^']|'')*')"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[<>!().\[\],*])"
    r"|(?P<name>[A-Za-z_][\w-]*))"
)
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


class ExprError(ValueError):
    """An expression this evaluator does not evaluate: the text says what and why."""


@dataclass
class Status:
    """The job's state a step's ``if:`` reads through the status functions."""

    failed: bool = False


@dataclass
class Scope:
    """What an expression reads: the contexts, the job's status, and what was not followed.

    ``unfollowed``: contexts whose values Cujo does not have (``needs``, ``vars``):
    reading one is ``null`` and noted in ``notes``, never silently.
    ``secret``: called with each secret's name, returns the decoy it stands for.
    """

    contexts: Mapping[str, Any]
    secret: Callable[[str], str] = lambda name: ""
    status: Status = field(default_factory=Status)
    unfollowed: frozenset[str] = frozenset({"steps", "needs", "vars", "jobs"})
    notes: list[str] = field(default_factory=list)
    secrets_read: list[str] = field(default_factory=list)


class _Secrets:
    """The ``secrets`` context: every name is a decoy (recorded as read)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def get(self, name: str) -> str:
        upper = name.upper()
        if upper not in self.scope.secrets_read:
            self.scope.secrets_read.append(upper)
        return self.scope.secret(upper)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExprError(f"unknown syntax at {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def _number(value: Any) -> float:
    """Return ``value`` as GitHub coerces it to a number (NaN where it cannot)."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0.0
        try:
            return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        except ValueError:
            return math.nan
    return math.nan


def truthy(value: Any) -> bool:
    """Return GitHub's truthiness of ``value`` (false, 0, -0, '', null, NaN are false)."""
    if value is None or value is False or value == "":
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    return True


def _equal(a: Any, b: Any) -> bool:
    if type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        if isinstance(a, str):
            return a.lower() == str(b).lower()
        if isinstance(a, (dict, list)):
            return a is b
        return bool(a == b)
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return _number(a) == _number(b)


def _compare(a: Any, b: Any, op: str) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        x: Any = a.lower()
        y: Any = b.lower()
    else:
        x, y = _number(a), _number(b)
        if math.isnan(x) or math.isnan(y):
            return False
    return bool({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op])


def to_text(value: Any) -> str:
    """Return ``value`` as GitHub writes it into a string (null is '')."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return str(value)


def _format(template: str, args: list[Any]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "{{":
            return "{"
        if match.group(0) == "}}":
            return "}"
        index = int(match.group(1))
        if index >= len(args):
            raise ExprError(f"format() names argument {index}, which is not given")
        return to_text(args[index])

    return re.sub(r"\{\{|\}\}|\{(\d+)\}", one, template)


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], scope: Scope) -> None:
        self.tokens, self.pos, self.scope = tokens, 0, scope

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise ExprError(f"expected {value!r}, found {token[1] or 'the end'!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.peek()[0] != "end":
            raise ExprError(f"unexpected {self.peek()[1]!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.equality()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.equality()
            value = right if truthy(value) else value
        return value

    def equality(self) -> Any:
        value = self.comparison()
        while self.peek()[1] in ("==", "!=") and self.peek()[0] == "op":
            op = self.take()[1]
            right = self.comparison()
            value = _equal(value, right) == (op == "==")
        return value

    def comparison(self) -> Any:
        value = self.unary()
        while self.peek()[1] in ("<", "<=", ">", ">=") and self.peek()[0] == "op":
            op = self.take()[1]
            value = _compare(value, self.unary(), op)
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        value, path = self.primary()
        while self.peek() in (("op", "."), ("op", "[")):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind == "op" and name == "*":
                    value, path = _star(value), f"{path}.*"
                    continue
                if kind != "name":
                    raise ExprError(f"expected a property name after '.', found {name!r}")
                value, path = self.member(value, path, name)
            else:
                if self.peek() == ("op", "*"):
                    self.take()
                    self.take("]")
                    value, path = _star(value), f"{path}[*]"
                    continue
                key = self.or_()
                self.take("]")
                value, path = self.member(value, path, key)
        return value

    def member(self, value: Any, path: str, key: Any) -> tuple[Any, str]:
        shown = f"{path}.{to_text(key)}"
        if isinstance(value, _Secrets):
            return value.get(to_text(key)), shown
        if isinstance(value, _Unfollowed):
            if value.name not in self.scope.notes:
                self.scope.notes.append(value.name)
            return None, shown
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            return lowered.get(to_text(key).lower()), shown
        if isinstance(value, list):
            if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
                # An object filter: the property of each element.
                return [
                    {str(k).lower(): v for k, v in e.items()}.get(key.lower())
                    for e in value
                    if isinstance(e, dict)
                ], shown
            index = _number(key)
            if math.isnan(index) or index < 0 or index >= len(value):
                return None, shown
            return value[int(index)], shown
        return None, shown

    def primary(self) -> tuple[Any, str]:
        kind, text = self.take()
        if kind == "num":
            number = _number(text)
            return (int(number) if number.is_integer() else number), text
        if kind == "str":
            return text[1:-1].replace("''", "'"), text
        if kind == "op" and text == "(":
            value = self.or_()
            self.take(")")
            return value, "(…)"
        if kind != "name":
            raise ExprError(f"unexpected {text or 'end of expression'!r}")
        lowered = text.lower()
        if self.peek() == ("op", "("):
            return self.call(lowered, text), f"{text}()"
        if lowered in ("true", "false"):
            return lowered == "true", text
        if lowered == "null":
            return None, text
        if lowered == "secrets":
            return _Secrets(self.scope), text
        if lowered in self.scope.unfollowed:
            return _Unfollowed(lowered), text
        if lowered not in self.scope.contexts:
            raise ExprError(f"the context `{text}` is not one Cujo evaluates")
        return self.scope.contexts[lowered], text

    def call(self, name: str, shown: str) -> Any:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ("op", ")"):
            args.append(self.or_())
            if self.peek() == ("op", ","):
                self.take()
            elif self.peek() != ("op", ")"):
                raise ExprError(f"expected ',' or ')' in {shown}(), found {self.peek()[1]!r}")
        self.take(")")
        return _call(name, shown, args, self.scope.status)


class _Unfollowed:
    """A context Cujo does not have the values of (read as null, and said)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _star(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _call(name: str, shown: str, args: list[Any], status: Status) -> Any:
    arity = {"contains": 2, "startswith": 2, "endswith": 2, "tojson": 1, "fromjson": 1,
             "success": 0, "always": 0, "failure": 0, "cancelled": 0}  # fmt: skip
    if name in arity and len(args) != arity[name]:
        raise ExprError(f"{shown}() takes {arity[name]} argument(s), given {len(args)}")
    if name == "contains":
        hay, needle = args
        if isinstance(hay, list):
            return any(_equal(item, needle) for item in hay)
        return to_text(needle).lower() in to_text(hay).lower()
    if name == "startswith":
        return to_text(args[0]).lower().startswith(to_text(args[1]).lower())
    if name == "endswith":
        return to_text(args[0]).lower().endswith(to_text(args[1]).lower())
    if name == "format":
        if not args:
            raise ExprError("format() needs a template")
        return _format(to_text(args[0]), args[1:])
    if name == "join":
        if len(args) not in (1, 2):
            raise ExprError(f"join() takes 1 or 2 arguments, given {len(args)}")
        sep = to_text(args[1]) if len(args) == 2 else ","
        items = args[0] if isinstance(args[0], list) else [args[0]]
        return sep.join(to_text(i) for i in items)
    if name == "tojson":
        return json.dumps(args[0], indent=2)
    if name == "fromjson":
        try:
            return json.loads(to_text(args[0]))
        except ValueError as exc:
            raise ExprError(f"fromJSON() of text that is not JSON ({exc})") from exc
    if name in ("success", "always", "failure", "cancelled"):
        return {
            "success": not status.failed,
            "always": True,
            "failure": status.failed,
            "cancelled": False,
        }[name]
    raise ExprError(f"the function {shown}() is not one Cujo evaluates")


def evaluate(expression: str, scope: Scope) -> Any:
    """Return the value of one expression (the text inside ``${{ }}``); raise ExprError."""
    return _Parser(_tokens(expression), scope).parse()


def interpolate(text: str, scope: Scope) -> str:
    """Return ``text`` with each ``${{ }}`` replaced by its value as text; raise ExprError."""
    return _EXPRESSION.sub(lambda m: to_text(evaluate(m.group(1), scope)), text)


def condition(text: str, scope: Scope) -> bool:
    """Return whether an ``if:`` holds: ``success()`` when empty, ``${{ }}`` optional, and
    ``success() && (…)`` unless it calls a status function itself, as GitHub reads it."""
    inner = text.strip()
    match = re.fullmatch(r"\$\{\{(.*)\}\}", inner, re.DOTALL)
    if match and "${{" not in match.group(1):
        inner = match.group(1).strip()
    elif "${{" in inner:
        inner = to_text(interpolate(inner, scope))
    if not inner:
        return not scope.status.failed
    if not re.search(r"\b(success|always|failure|cancelled)\s*\(", inner, re.IGNORECASE):
        inner = f"success() && ({inner})"
    return truthy(evaluate(inner, scope))
