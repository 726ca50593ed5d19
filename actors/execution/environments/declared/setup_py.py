"""setup.py read as a syntax tree, never executed: its setup() keywords that are literals, or names
bound at the top of the module (or under an if or try there) to literals, lists added or spread
together, dict() calls and `**` of such dicts."""
from __future__ import annotations

import ast

from .files import inside
from .roles import roles
from .values import lines


class SetupPy:
    """setup.py's setup() keywords, as far as they are made of literals."""

    def __init__(self, text: str | None, problems: list[str]) -> None:
        self.problems = problems
        self.keywords: dict[str, ast.expr] = {}
        self.bindings: dict[str, ast.expr] = {}
        self._extras: dict[str, list[str]] | None = None
        self._extras_files: dict[str, str] = {}
        if text is None:
            return
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError) as error:
            problems.append(f"setup.py does not parse ({error.__class__.__name__}: {error}); none of it is read")
            return
        for node in tree.body:
            self._bind(node)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node.func) == "setup":
                for keyword in node.keywords:
                    if keyword.arg is None:  # setup(**options)
                        self.keywords.update(self._dict_nodes(keyword.value))
                    else:
                        self.keywords[keyword.arg] = keyword.value

    def _bind(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.bindings[target.id] = self._as_dict(node.value)
                elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                      and isinstance(target.slice, ast.Constant) and isinstance(self.bindings.get(target.value.id), ast.Dict)):
                    bound = self.bindings[target.value.id]
                    bound.keys.append(target.slice)
                    bound.values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            self.bindings[node.target.id] = node.value
        elif (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add)
              and node.target.id in self.bindings):
            self.bindings[node.target.id] = ast.BinOp(left=self.bindings[node.target.id], op=ast.Add(), right=node.value)
        elif isinstance(node, ast.If | ast.Try):
            for inner in node.body:
                self._bind(inner)

    def _as_dict(self, node: ast.expr) -> ast.expr:
        """`dict(a=[...])` as the `{"a": [...]}` it makes, so that later `x["b"] = ...` add to it."""
        if isinstance(node, ast.Call) and _call_name(node.func) == "dict":
            entries = self._dict_nodes(node)
            return ast.Dict(keys=[ast.Constant(key) for key in entries], values=list(entries.values()))
        return node

    def keyword(self, name: str):
        node = self.keywords.get(name)
        return None if node is None else self._value(node)

    def extras(self) -> dict[str, list[str]]:
        """extras_require's entries whose requirements are literals."""
        if self._extras is None:
            self._extras = {}
            node = self.keywords.get("extras_require")
            for key, value_node in ({} if node is None else self._dict_nodes(node)).items():
                value = self._value(value_node)
                if isinstance(value, str):
                    value = lines(value)
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    self._extras[key] = value
                elif (path := self._file_argument(value_node)) is not None:
                    self._extras_files[key] = path
                elif roles([key]):
                    self.problems.append(f"setup.py extras_require {key} is computed; not read")
        return self._extras

    def extras_files(self) -> dict[str, str]:
        """Extras setup.py reads from a file: `extras_require={"test": read("requirements/test.txt")}`."""
        self.extras()
        return self._extras_files

    def _dict_nodes(self, node: ast.expr, depth: int = 0) -> dict[str, ast.expr]:
        if depth > 10:
            return {}
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self._dict_nodes(self.bindings[node.id], depth + 1)
        found: dict[str, ast.expr] = {}
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if key is None:
                    found.update(self._dict_nodes(value, depth + 1))
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found[key.value] = value
        elif isinstance(node, ast.Call) and _call_name(node.func) == "dict":
            for argument in node.args:
                found.update(self._dict_nodes(argument, depth + 1))
            for keyword in node.keywords:
                if keyword.arg is None:
                    found.update(self._dict_nodes(keyword.value, depth + 1))
                else:
                    found[keyword.arg] = keyword.value
        return found

    def _file_argument(self, node: ast.expr, depth: int = 0) -> str | None:
        if isinstance(node, ast.Name) and node.id in self.bindings and depth < 10:
            return self._file_argument(self.bindings[node.id], depth + 1)
        if isinstance(node, ast.Call):
            for argument in node.args:
                value = self._value(argument)
                if isinstance(value, str) and value.endswith((".txt", ".in")):
                    return inside("", value)
        return None

    def _value(self, node: ast.expr, depth: int = 0):
        """The node's value when it is made of literals; None otherwise."""
        if depth > 20:
            return None
        if isinstance(node, ast.Name):
            bound = self.bindings.get(node.id)
            return None if bound is None else self._value(bound, depth + 1)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list = []
            for element in node.elts:
                value = self._value(element.value if isinstance(element, ast.Starred) else element, depth + 1)
                if value is None or isinstance(element, ast.Starred) and not isinstance(value, list):
                    return None
                if isinstance(element, ast.Starred):
                    items.extend(value)
                else:
                    items.append(value)
            return items
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._value(node.left, depth + 1), self._value(node.right, depth + 1)
            if isinstance(left, list) and isinstance(right, list) or isinstance(left, str) and isinstance(right, str):
                return left + right
            return None
        if isinstance(node, ast.Dict) or isinstance(node, ast.Call) and _call_name(node.func) == "dict":
            return {key: self._value(value, depth + 1) for key, value in self._dict_nodes(node, depth + 1).items()}
        if isinstance(node, ast.Call) and _call_name(node.func) in ("list", "sorted", "tuple", "set") and len(node.args) == 1:
            return self._value(node.args[0], depth + 1)
        return None


def _call_name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
