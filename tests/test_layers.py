"""The package's floors: every import in src/ goes to its own floor or one below, and no import
chain comes back to where it started. Read from the source with `ast`, every import counted,
those inside functions too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: floors from the ground up; a module sits on the floor of its longest listed prefix
LAYERS: list[tuple[str, list[str]]] = [
    ("ground", ["errors", "registry", "jsonl", "paths", "progress", "generation", "config_types",
                "http_json", "faults", "metrics", "memory", "precision", "loggers"]),
    ("data", ["episode", "chat", ""]),  # "" = the package's own __init__
    ("model", ["policy"]),  # loading, KV cache, backends, scoring, the policy session
    ("tools", ["llm", "search"]),  # what environments call: chat models, retrievers
    ("envs", ["envs"]),
    ("signals", ["rewards", "credit"]),  # reward shapers and credit estimators
    ("config", ["config"]),  # reads YAML and checks names against the registries below
    ("loop", ["rollout", "evaluate", "guidance"]),  # guidance: expert takeovers of rollouts
    ("train", ["train"]),
    ("workflows", ["workflows", "study", "bench", "play", "report", "oracle_check"]),
    ("cli", ["cli", "__main__"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (SRC / "turncredit").rglob("*.py")}


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's own modules that `name` imports (a `from pkg import sub` counts as sub)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.startswith("turncredit") and t != name:
                out.add(t)
    return out


def floor(name: str) -> int:
    rel = name.removeprefix("turncredit").removeprefix(".")
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".") or (p == "" and rel == "")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best is None:
        raise AssertionError(f"{name}: on no floor; add it to LAYERS in {__file__}")
    return best


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_every_import_goes_down_or_level() -> None:
    upward = [f"{a} ({LAYERS[floor(a)][0]}) imports {b} ({LAYERS[floor(b)][0]})"
              for a, targets in graph().items() for b in sorted(targets) if floor(b) > floor(a)]
    assert upward == []


def test_the_checks_catch_what_they_are_for() -> None:
    """The walker sees lazy and relative imports, and the two checks fail on a circle and on an
    upward import (checked on a made-up graph, so the real one staying clean proves something)."""
    edges = graph()
    assert "turncredit.credit.registry" in edges["turncredit.credit.grpo"]  # `from ... import` of a module
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert floor("turncredit.policy.session") < floor("turncredit.config") < floor("turncredit.train.trainer")
    with pytest.raises(AssertionError, match="on no floor"):
        floor("turncredit.somewhere_new")
