"""What AWS requests each Lambda function's code can reach, read from the source (`ast`), not from a run.

From each function's entry (app.py's handlers, functions/docreader/handler.py) the walk follows chalicelib's
module functions (imports resolved), `self.<method>` calls, functions passed or stored as values, and every
method of a chalicelib class the code instantiates or names. A call `deps.<port>.<method>(...)` is an edge
to AWS: `PortMap` says which IAM requests it makes. A queue's name is resolved where it is a literal, a
`Stage` member or a parameter bound to one by a caller (`enqueue(deps, Stage.DOCREADER, ...)` through
`deps.queue.send(stage, ...)`); a name the walk cannot resolve stands for every queue.

A row's `queued_stage` is data: one function writes it (`mark_queued`), another reads it (housekeeping's
`deps.queue.backlog(knowledge.queued_stage)`). Its values are what the walk finds written anywhere, so the
reader's needs follow every stage the pipeline can queue a document in.

What it cannot follow (dynamic dispatch): methods of objects it did not see built (what a port or
`deps.engine()`/`embedding_model()`/`docreader()` returns: the index, the models, the parsers), `getattr`,
a stage name computed into a local variable (it stands for every queue), and calls into the adapters other
than through the ports (the adapters are the port map's business, not walked as code).
"""

from __future__ import annotations

import ast
import importlib
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from chalicelib.ports import Dependencies

ROOT = Path(__file__).resolve().parents[2]
#: chalicelib's parts that are not use-case code: the adapters are the ports' far side (PortMap), the
#: composition root and the local runtime are not walked (their calls are wiring, not a Lambda's work)
NOT_WALKED = ("chalicelib.adapters", "chalicelib.bootstrap", "chalicelib.local")
#: the names a `Dependencies` goes by: `deps.<port>...`, `self.deps.<port>...`
DEPS_NAMES = frozenset({"deps"})


@dataclass(frozen=True, order=True)
class Need:
    """One IAM request: an action on a resource named as the code names it (`queue`, `docreader`)."""

    action: str
    kind: str  # queue | dead-letter-queue | table | state-machine | execution | task-token | event-bus | ...
    name: str = ""


@dataclass(frozen=True)
class PortCall:
    port: str  # the Dependencies attribute ("queue"), or "deps" for a method of Dependencies itself
    method: str
    args: tuple[frozenset[str] | None, ...]  # each positional argument's possible texts (None: unknown)


class PortMap(Protocol):
    """The IAM requests a port call makes (tests/infra/port_map.py)."""

    def needs(self, call: PortCall) -> frozenset[Need]: ...

    def every_need(self, port: str) -> frozenset[Need]:
        """What any call of the port may make (a port handed on as a value: `tracker = deps.tracker`)."""
        ...


Values = frozenset[str] | None
Env = frozenset[tuple[str, frozenset[str]]]


@dataclass
class Module:
    name: str
    tree: ast.Module
    is_package: bool
    defs: dict[str, ast.FunctionDef | ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, attribute)
    constants: dict[str, ast.expr] = field(default_factory=dict)


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


class Program:
    """chalicelib, app.py and functions/docreader/handler.py, parsed once."""

    def __init__(self, ports: PortMap, files: list[Path] | None = None) -> None:
        self.ports = ports
        files = files or [
            *sorted((ROOT / "chalicelib").rglob("*.py")),
            ROOT / "app.py",
            ROOT / "functions" / "docreader" / "handler.py",
        ]
        self.modules: dict[str, Module] = {}
        for path in files:
            name, is_package = _module_name(path)
            module = Module(name, ast.parse(path.read_text(), str(path)), is_package)
            self._index(module)
            self.modules[name] = module
        #: what the walk found written to a row's `queued_stage` (None until the first pass)
        self.queued_stages: Values = None
        self._written_stages: set[str] = set()
        self._facts: dict[str, Facts] = {}

    # ------------------------------------------------------------------ names

    def _index(self, module: Module) -> None:
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                module.defs[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        module.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                module.constants[node.target.id] = node.value
        # imports anywhere in the module: the lazy ones inside functions (heavy modules off the cold start)
        # name their module for the whole file, as a name is rarely imported twice to different things
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        for statement in ast.walk(module.tree):
            if isinstance(statement, ast.ImportFrom):
                base = statement.module or ""
                if statement.level:
                    up = package.split(".")[: len(package.split(".")) - statement.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in statement.names:
                    module.imports.setdefault(alias.asname or alias.name, (base, alias.name))
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname:
                        module.imports.setdefault(alias.asname, (alias.name, ""))
                    else:
                        top = alias.name.split(".")[0]
                        module.imports.setdefault(top, (top, ""))

    def _lookup(self, module_name: str, name: str, seen: int = 0) -> str | None:
        """`module.name` as a target: `mod:<module>`, `<module>:<def>` or `<module>:<constant>`."""
        if f"{module_name}.{name}" in self.modules:
            return f"mod:{module_name}.{name}"
        module = self.modules.get(module_name)
        if module is None or seen > 10:
            return None
        if name in module.defs or name in module.constants:
            return f"{module_name}:{name}"
        if name in module.imports:
            base, attribute = module.imports[name]
            if not attribute:
                return f"mod:{base}" if base in self.modules else None
            return self._lookup(base, attribute, seen + 1)
        return None

    def resolve(self, module: Module, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            if expr.id in module.defs or expr.id in module.constants:
                return f"{module.name}:{expr.id}"
            if expr.id in module.imports:
                base, attribute = module.imports[expr.id]
                if not attribute:
                    return f"mod:{base}" if base in self.modules else None
                return self._lookup(base, attribute)
            return None
        if isinstance(expr, ast.Attribute):
            owner = self.resolve(module, expr.value)
            if owner is None:
                return None
            if owner.startswith("mod:"):
                return self._lookup(owner[4:], expr.attr)
            return f"{owner}.{expr.attr}"
        return None

    def node(self, target: str) -> tuple[Module, ast.FunctionDef | ast.ClassDef, str | None] | None:
        """The definition a target names, with its module and its class (for a method)."""
        module_name, _, qualified = target.partition(":")
        module = self.modules.get(module_name)
        if module is None:
            return None
        first, _, rest = qualified.partition(".")
        found = module.defs.get(first)
        if not rest:
            return (module, found, None) if found is not None else None
        if isinstance(found, ast.ClassDef):
            for item in found.body:
                if isinstance(item, ast.FunctionDef) and item.name == rest:
                    return module, item, found.name
        return None

    # ------------------------------------------------------------------ values

    def value(self, module: Module, expr: ast.expr, env: Mapping[str, frozenset[str]]) -> Values:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return frozenset({expr.value})
        if isinstance(expr, ast.IfExp):
            a, b = self.value(module, expr.body, env), self.value(module, expr.orelse, env)
            return None if a is None or b is None else a | b
        if isinstance(expr, ast.Name) and expr.id in env:
            return env[expr.id]
        if isinstance(expr, ast.Attribute) and expr.attr == "value":
            return self.value(module, expr.value, env)
        if isinstance(expr, ast.Attribute) and expr.attr == "queued_stage":
            return self.queued_stages
        if isinstance(expr, ast.Name | ast.Attribute):
            target = self.resolve(module, expr)
            if target is None or target.startswith("mod:"):
                return None
            owner, _, name = target.partition(":")
            if name in self.modules[owner].constants:  # a module's constant, here or imported
                return self.value(self.modules[owner], self.modules[owner].constants[name], {})
            return _enum_member(target)
        return None

    # ------------------------------------------------------------------ the walk

    def facts(self, target: str) -> Facts:
        """What a function's body calls: its port calls and the code it calls or names (read once)."""
        if target in self._facts:
            return self._facts[target]
        facts = Facts()
        found = self.node(target)
        if found is not None and not found[0].name.startswith(NOT_WALKED):
            module, definition, cls = found
            facts.module = module
            if isinstance(definition, ast.FunctionDef):
                facts.params = _parameters(definition, method=cls is not None)
                facts.defaults = _defaults(definition)
                self._read_body(facts, module, definition, cls)
        self._facts[target] = facts
        return facts

    def _read_body(self, facts: Facts, module: Module, definition: ast.FunctionDef, cls: str | None) -> None:
        self_ports = SELF_PORTS.get(f"{module.name}:{cls}", {})
        called: set[int] = set()
        for node in ast.walk(definition):
            if isinstance(node, ast.Assign):
                facts.queued_stage_writes += _queued_stage_writes(node)
            if not isinstance(node, ast.Call):
                continue
            called.add(id(node.func))
            port = self._port_of(node.func, self_ports)
            if port is not None and isinstance(node.func, ast.Attribute):
                facts.port_calls.append((port, node.func.attr, node))
                continue
            target = self._callee(module, node.func, cls)
            if target is not None:
                facts.calls.append((target, node))
        receivers = {
            id(n.func.value)
            for n in ast.walk(definition)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        for node in ast.walk(definition):
            if id(node) in called or not isinstance(node, ast.Name | ast.Attribute):
                continue
            if isinstance(node, ast.Attribute) and _is_deps(node.value) and node.attr in PORTS:
                if id(node) not in receivers:  # `tracker = deps.tracker`: any of its methods may follow
                    facts.escaped.add(node.attr)
                continue
            target = self._callee(module, node, cls)
            if target is not None:
                facts.calls.append((target, None))
        if "tracker" in facts.escaped:  # the span tracker is code: every method of it
            facts.calls.append((TRACKER, None))
        used = {
            n.id
            for _, _, call in facts.port_calls
            for arg in [*call.args, *(k.value for k in call.keywords)]
            for n in ast.walk(arg)
            if isinstance(n, ast.Name)
        } | {
            n.id
            for _, call in facts.calls
            if call is not None
            for arg in [*call.args, *(k.value for k in call.keywords)]
            for n in ast.walk(arg)
            if isinstance(n, ast.Name)
        }
        facts.relevant = frozenset(p for p in facts.params if p in used)

    def _port_of(self, func: ast.expr, self_ports: Mapping[str, str]) -> str | None:
        """`deps.<port>.<method>` -> the port; `deps.<method>` of Dependencies itself -> "deps"."""
        if not isinstance(func, ast.Attribute):
            return None
        receiver = func.value
        if isinstance(receiver, ast.Attribute) and _is_deps(receiver.value):
            return None if receiver.attr == "tracker" else receiver.attr
        if (
            isinstance(receiver, ast.Attribute)
            and isinstance(receiver.value, ast.Name)
            and receiver.value.id == "self"
            and receiver.attr in self_ports
        ):
            return self_ports[receiver.attr]
        if _is_deps(receiver) and func.attr in DEPS_METHODS:
            return "deps"
        return None

    def _callee(self, module: Module, func: ast.expr, cls: str | None) -> str | None:
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if cls is not None and isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                return f"{module.name}:{cls}.{func.attr}"
            # `deps.tracker.<method>`: the span tracker is chalicelib code, walked as such
            if (
                isinstance(receiver, ast.Attribute)
                and receiver.attr == "tracker"
                and _is_deps(receiver.value)
            ):
                return f"{TRACKER}.{func.attr}"
        target = self.resolve(module, func)
        if target is None or target.startswith("mod:"):
            return None
        return target

    def _targets(self, target: str) -> Iterator[str]:
        """A function, every method of a class, or what a module-level constant names (a dispatch table)."""
        found = self.node(target)
        if found is None:
            module_name, _, name = target.partition(":")
            module = self.modules.get(module_name)
            if module is not None and name in module.constants:
                for inner in ast.walk(module.constants[name]):
                    if isinstance(inner, ast.Name | ast.Attribute):
                        named = self.resolve(module, inner)
                        if named is not None and not named.startswith("mod:") and self.node(named):
                            yield from self._targets(named)
            return
        module, definition, _ = found
        if isinstance(definition, ast.ClassDef):
            for item in definition.body:
                if isinstance(item, ast.FunctionDef):
                    yield f"{module.name}:{definition.name}.{item.name}"
            return
        yield target

    def _bind(
        self, caller: Facts, env: Mapping[str, frozenset[str]], callee: str, call: ast.Call | None
    ) -> Env:
        """What the callee's parameters that matter are bound to: the call's arguments, else defaults."""
        facts = self.facts(callee)
        if not facts.relevant or facts.module is None:
            return frozenset()
        bound: dict[str, Values] = {
            name: self.value(facts.module, d, {}) for name, d in facts.defaults.items()
        }
        if call is None:  # named, not called here (a callback): its arguments are unknown
            bound = {}
        elif caller.module is not None:
            for name, arg in zip(facts.params, call.args, strict=False):
                bound[name] = None if isinstance(arg, ast.Starred) else self.value(caller.module, arg, env)
            for keyword in call.keywords:
                if keyword.arg:
                    bound[keyword.arg] = self.value(caller.module, keyword.value, env)
        return frozenset((k, v) for k, v in bound.items() if k in facts.relevant and v is not None)

    def walk(self, entries: list[str]) -> dict[Need, tuple[str, ...]]:
        """Every request reachable from the entries, each with its shortest call path (breadth first)."""
        start: list[tuple[str, Env]] = [(entry, frozenset()) for entry in entries]
        parent: dict[tuple[str, Env], tuple[str, Env] | None] = {state: None for state in start}
        queue = deque(start)
        needs: dict[Need, tuple[str, ...]] = {}
        while queue:
            state = queue.popleft()
            target, env = state
            facts = self.facts(target)
            if facts.module is None:
                continue
            values = dict(env)
            for port, method, port_call in facts.port_calls:
                args = tuple(self.value(facts.module, a, values) for a in port_call.args)
                if (port, method) == ("knowledge", "mark_queued"):
                    self._written_stages |= _known(args[2] if len(args) > 2 else None)
                for need in self.ports.needs(PortCall(port, method, args)):
                    if need not in needs:
                        needs[need] = _path(parent, state)
            for port in sorted(facts.escaped):
                for need in self.ports.every_need(port):
                    needs.setdefault(need, _path(parent, state))
            for rhs in facts.queued_stage_writes:
                self._written_stages |= _known(self.value(facts.module, rhs, values) if rhs else None)
            for callee, call in facts.calls:
                for resolved in self._targets(callee):
                    if self.facts(resolved).module is None:
                        continue
                    # a class named or built: each of its methods, with unknown arguments
                    bound = self._bind(facts, values, resolved, call if resolved == callee else None)
                    child = (resolved, bound)
                    if child not in parent:
                        parent[child] = state
                        queue.append(child)
        return needs

    # ------------------------------------------------------------------ entry points

    def function_reach(self, entries: Mapping[str, list[str]]) -> dict[str, dict[Need, tuple[str, ...]]]:
        """Each Lambda function's requests. Two passes: the first finds what is written to `queued_stage`,
        the second reads it back where the code reads a row's `queued_stage`."""
        for targets in entries.values():
            self.walk(targets)
        self.queued_stages = frozenset(self._written_stages)
        return {function: self.walk(targets) for function, targets in entries.items()}


@dataclass
class Facts:
    module: Module | None = None
    params: list[str] = field(default_factory=list)
    defaults: dict[str, ast.expr] = field(default_factory=dict)
    relevant: frozenset[str] = frozenset()
    port_calls: list[tuple[str, str, ast.Call]] = field(default_factory=list)
    calls: list[tuple[str, ast.Call | None]] = field(default_factory=list)
    queued_stage_writes: list[ast.expr | None] = field(default_factory=list)
    #: ports handed on as values, not called here
    escaped: set[str] = field(default_factory=set)


def _parameters(definition: ast.FunctionDef, *, method: bool) -> list[str]:
    params = [a.arg for a in definition.args.posonlyargs + definition.args.args]
    if method and params and params[0] in ("self", "cls"):
        params = params[1:]
    return params


def _defaults(definition: ast.FunctionDef) -> dict[str, ast.expr]:
    arguments = definition.args
    positional = arguments.posonlyargs + arguments.args
    found = {
        a.arg: d
        for a, d in zip(
            positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True
        )
    }
    found |= {
        a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None
    }
    return found


def _is_deps(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in DEPS_NAMES
    return isinstance(expr, ast.Attribute) and expr.attr in DEPS_NAMES


def _queued_stage_writes(node: ast.Assign) -> list[ast.expr | None]:
    """The values `X.queued_stage = ...` assigns (also in a tuple assignment)."""
    written: list[ast.expr | None] = []
    for target in node.targets:
        if isinstance(target, ast.Tuple):
            values: list[ast.expr | None] = (
                list(node.value.elts) if isinstance(node.value, ast.Tuple) else [None] * len(target.elts)
            )
            pairs = list(zip(target.elts, values, strict=False))
        else:
            pairs = [(target, node.value)]
        written += [
            rhs for lhs, rhs in pairs if isinstance(lhs, ast.Attribute) and lhs.attr == "queued_stage"
        ]
    return written


def _known(values: Values) -> set[str]:
    return set(values) if values is not None else {UNKNOWN_STAGE}


def _path(
    parent: Mapping[tuple[str, Env], tuple[str, Env] | None], state: tuple[str, Env]
) -> tuple[str, ...]:
    path: list[str] = []
    current: tuple[str, Env] | None = state
    while current is not None:
        path.append(current[0].partition(":")[2])
        current = parent[current]
    return tuple(reversed(path))


#: a stage written to `queued_stage` that the walk could not resolve (the test fails on it)
UNKNOWN_STAGE = "<unresolved>"
#: the span tracker (`deps.tracker`) is chalicelib code over two ports: walked, its `self.<attr>` are ports
TRACKER = "chalicelib.services.stage_spans:SpanTracker"
SELF_PORTS: dict[str, dict[str, str]] = {TRACKER: {"spans": "spans", "knowledge": "knowledge"}}
#: the ports: the attributes of `Dependencies` but its settings (no AWS request)
PORTS = frozenset(Dependencies.__annotations__) - {"settings"}
#: methods of Dependencies itself whose requests the port map knows: the embedding cache's table. The
#: engine, the models and the parsers make theirs through the objects they return (not followed here: their
#: grants are the `why` ones of infra/permissions.py, which moto cannot check either)
DEPS_METHODS = frozenset({"embedding_cache"})


def _enum_member(target: str) -> Values:
    """`module:Enum.MEMBER` -> the member's value, when it is one of chalicelib's enums."""
    module_name, _, qualified = target.partition(":")
    if qualified.count(".") != 1:
        return None
    owner, member = qualified.split(".")
    try:
        cls = getattr(importlib.import_module(module_name), owner)
    except (ImportError, AttributeError):
        return None
    value = getattr(cls, member, None)
    if isinstance(value, Enum) and isinstance(value.value, str):
        return frozenset({value.value})
    return None
