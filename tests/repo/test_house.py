"""The house's rules, read from the code's imports (grimp builds the graph, statically).

docs/design.md section 2: no import cycle (an import inside a function counts: hiding a cycle
there is still a cycle); the sandbox side never imports the relay; the relay reads the
sandbox only through ``cujo_action.schema``, ``cujo_action.limits`` and the bundle reader;
the pure parts (the rules and judges, verb parsing, the run state machine) touch no I/O.
Each rule is also checked against a planted violation, so a rule that can no longer fail
is itself a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import grimp
import pytest
from repo_paths import TOP

PACKAGES = ("cujo_action", "app_relay")

# What the relay may import from the sandbox side: the data that crosses the boundary,
# the table of caps the reports name, and the one capped bundle reader.
RELAY_MAY_READ = frozenset(
    {"cujo_action", "cujo_action.schema", "cujo_action.limits", "cujo_action.evidence.reader"}
)

# Pure parts (docs/design.md section 2): plain values in, plain values out. They may not reach,
# even through another module, any of these.
PURE = (
    "app_relay.decide",
    "app_relay.verbs.parse",
    "app_relay.verbs.decision",
    "app_relay.runstate",
    "app_relay.verdict",
    "app_relay.merge.gate",
    "app_relay.github.merge_facts",
    "app_relay.github.branch_rules",
)
# GitHub's vocabulary (app_relay.github.vocab) is pure; the rest of github/ talks to it.
PURE_GITHUB = frozenset(
    {
        "app_relay.github",
        "app_relay.github.vocab",
        "app_relay.github.branch_rules",
        "app_relay.github.merge_facts",
    }
)
IO_MODULES = frozenset(
    {
        "app_relay.github",
        "app_relay.store",
        "app_relay.webhook",
        "app_relay.cli",
        "app_relay.board",
        "app_relay.settings",
        "app_relay.model.claude",
    }
)
IO_LIBRARIES = frozenset(
    {"requests", "github", "sqlalchemy", "anthropic", "fastapi", "uvicorn", "httpx", "socket"}
    | {"subprocess", "urllib"}
)


def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)


def edges(g: grimp.ImportGraph) -> dict[str, set[str]]:
    internal = {m for m in g.modules if m.split(".")[0] in PACKAGES}
    return {m: set(g.find_modules_directly_imported_by(m)) & internal for m in internal}


def cycles(out: Mapping[str, Set[str]]) -> list[list[str]]:
    """Return every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain of imports cannot hit the recursion limit.
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(out[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            for nxt in todo:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(out[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(out):
        if module not in index:
            visit(module)
    return found


def within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def described(g: grimp.ImportGraph, importer: str, imported: str) -> str:
    lines = [
        f"{d['importer']}:{d['line_number']} {d['line_contents']}"
        for d in g.get_import_details(importer=importer, imported=imported)
    ]
    return f"{importer} -> {imported} (" + "; ".join(lines) + ")"


def cycle_problems(g: grimp.ImportGraph) -> list[str]:
    out = edges(g)
    problems = []
    for component in cycles(out):
        inside = set(component)
        ties = [described(g, a, b) for a in component for b in sorted(out[a] & inside)]
        problems.append(f"cycle {' <-> '.join(component)}: " + " | ".join(ties))
    return problems


def boundary_problems(g: grimp.ImportGraph) -> list[str]:
    problems = []
    for importer in sorted(g.modules):
        top = importer.split(".")[0]
        if top not in PACKAGES:
            continue
        for imported in sorted(g.find_modules_directly_imported_by(importer)):
            if top == "cujo_action" and within(imported, ["app_relay"]):
                crossing = described(g, importer, imported)
                problems.append("the sandbox imports the relay: " + crossing)
            if (
                top == "app_relay"
                and within(imported, ["cujo_action"])
                and imported not in RELAY_MAY_READ
            ):
                problems.append(
                    "the relay imports sandbox internals: " + described(g, importer, imported)
                )
    return problems


def purity_problems(g: grimp.ImportGraph) -> list[str]:
    problems = []
    pure = sorted(m for m in g.modules if within(m, PURE))
    for module in pure:
        for reached in sorted(g.find_upstream_modules(module)):
            if reached in PURE_GITHUB:
                continue
            if within(reached, IO_MODULES) or reached.split(".")[0] in IO_LIBRARIES:
                chain = g.find_shortest_chain(importer=module, imported=reached) or ()
                problems.append(f"pure {module} reaches {reached}: {' -> '.join(chain)}")
    return problems


# The layers (DESIGN section 2): inside each package, and inside a folder split in rooms,
# a folder imports only folders below it, never one above and never a sibling of its own
# layer. Each row is one layer, top first; names in one row are siblings, which may not
# import each other. A module directly in the package that no row names (``cujo_action``'s
# ``__init__``, ``app_relay/verdict.py``, ``net/egress.py``) is the floor: every folder may
# import it, it imports no folder. Where DESIGN gives no order for a pair, the order chosen
# is said beside it.
LAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "cujo_action": (
        ("__main__",),
        ("run",),
        ("checks",),
        ("arm", "prepare"),
        # reading the workflows, pure: prepare asks whether a base workflow runs the head,
        # checks what the change does to CI (DESIGN names no such folder).
        ("workflow",),
        ("evidence",),
        ("net",),
        # watch reads /proc and files through the sandbox's boundary and uids: above it.
        ("watch",),
        ("sandbox",),
        ("find",),
        ("schema",),
        ("limits",),
    ),
    # net/'s rooms: the proxy reads names as the resolver does (dns) and answers as the
    # look-alikes do; the rooms share egress.py, helperconfig.py and namebook.py (the floor).
    "cujo_action.net": (
        ("proxy",),
        ("lookalike", "dns", "ns"),
    ),
    "app_relay": (
        ("__main__",),
        ("cli", "migrations"),
        # the webhook's app mounts the board's pages.
        ("webhook",),
        ("board",),
        ("verbs", "merge"),
        ("runs",),
        # the adapters: the record over GitHub (neither imports the other today), with the
        # run states between them: the record keeps them, what GitHub shows is worded
        # from GitHub's vocabulary.
        ("store",),
        ("runstate",),
        ("github",),
        # the pure core: the judges over the model's port and tools they ask through (DESIGN
        # orders neither), over the words everything writes for people; the verdict they
        # all make or render (``verdict.py``) is the floor.
        ("decide",),
        ("model",),
        ("words",),
        ("observe",),
        ("settings",),
    ),
}


def layer_problems(g: grimp.ImportGraph) -> list[str]:
    """Return each import that runs against ``LAYERS``, and each folder no row places."""
    problems = []
    for container, rows in LAYERS.items():
        rank = {name: i for i, row in enumerate(rows) for name in row}
        depth = container.count(".") + 1
        children: dict[str, str] = {}
        for module in g.modules:
            if module.startswith(container + "."):
                child = module.split(".")[depth]
                is_folder = module.count(".") > depth or g.find_children(module) != set()
                if is_folder or children.get(child) != "folder":
                    children[child] = "folder" if is_folder else "module"
        problems += [
            f"{container}.{child} is a folder no row of LAYERS places"
            for child, kind in sorted(children.items())
            if kind == "folder" and child not in rank
        ]
        floor = len(rows)
        for importer in sorted(m for m in g.modules if m.startswith(container + ".")):
            above = importer.split(".")[depth]
            for imported in sorted(g.find_modules_directly_imported_by(importer)):
                if not imported.startswith(container + "."):
                    continue
                below = imported.split(".")[depth]
                if below == above:
                    continue
                high, low = rank.get(above, floor), rank.get(below, floor)
                if high < low or (high == low == floor):
                    continue
                problems.append("against the layers: " + described(g, importer, imported))
    return problems


def test_the_tree_has_no_import_cycle() -> None:
    assert cycle_problems(graph()) == []


def test_the_relay_reads_the_sandbox_only_through_its_contract() -> None:
    assert boundary_problems(graph()) == []


def test_the_pure_parts_reach_no_io() -> None:
    assert purity_problems(graph()) == []


def test_every_folder_imports_only_folders_below_it() -> None:
    assert layer_problems(graph()) == []


# Each rule against a planted violation: the checks above can fail.


def planted(*imports: tuple[str, str]) -> grimp.ImportGraph:
    g = graph()
    for importer, imported in imports:
        for module in (importer, imported):
            if module not in g.modules:
                g.add_module(module)
        g.add_import(importer=importer, imported=imported, line_number=1, line_contents="x")
    return g


def test_a_planted_cycle_is_found() -> None:
    g = planted(("cujo_action.schema", "cujo_action.run"))
    assert any("cujo_action.run" in p and "cujo_action.schema" in p for p in cycle_problems(g))


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("app_relay.decide.judge", "cujo_action.sandbox.jail"),
        ("app_relay.board.view", "cujo_action.evidence.stages"),
        ("cujo_action.run", "app_relay.store"),
    ],
)
def test_a_planted_crossing_is_found(importer: str, imported: str) -> None:
    assert any(imported in p for p in boundary_problems(planted((importer, imported))))


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("cujo_action.find.matcher", "cujo_action.arm.arming"),  # up a layer
        ("cujo_action.arm.arming", "cujo_action.prepare.plan"),  # a sibling
        ("cujo_action.net.dns.resolver", "cujo_action.net.proxy.addon"),  # up a room
        ("cujo_action.net.egress", "cujo_action.net.ns.netns"),  # the floor, up
        ("app_relay.store.runs", "app_relay.runs.coordinator"),  # an adapter, a feature
    ],
)
def test_a_planted_import_against_the_layers_is_found(importer: str, imported: str) -> None:
    found = layer_problems(planted((importer, imported)))
    assert any(f"{importer} -> {imported}" in p for p in found)


def test_a_folder_no_row_places_is_found() -> None:
    g = planted(("cujo_action.attic.box", "cujo_action.schema"))
    assert "cujo_action.attic is a folder no row of LAYERS places" in layer_problems(g)


def test_a_planted_io_in_a_pure_part_is_found() -> None:
    g = planted(("app_relay.runstate.machine", "app_relay.store"))
    assert any(
        "app_relay.runstate.machine reaches app_relay.store" in p for p in purity_problems(g)
    )


def test_a_cycle_hidden_in_a_function_is_still_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grimp reads imports anywhere in a module: an import inside a function is an arrow."""
    package = tmp_path / "houseprobe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(
        "def late():\n    from houseprobe import high\n\n    return high.VALUE\n"
    )
    (package / "high.py").write_text("from houseprobe import low\n\nVALUE = low\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    g = grimp.build_graph("houseprobe", cache_dir=None)
    assert g.direct_import_exists(importer="houseprobe.low", imported="houseprobe.high")
    out = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert cycles(out) == [["houseprobe.high", "houseprobe.low"]]


def test_only_the_boundary_spells_no_follow() -> None:
    """Opening without following a link has one home: ``sandbox/boundary.open_no_follow``."""
    home = TOP / "cujo_action" / "sandbox" / "boundary.py"
    spelled = [
        f"{path.relative_to(TOP)}:{number}"
        for path in sorted((TOP / "cujo_action").rglob("*.py"))
        if path != home
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "O_NOFOLLOW" in line
    ]
    assert spelled == []
    assert "O_NOFOLLOW" in home.read_text(encoding="utf-8")
