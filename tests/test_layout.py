"""The package's layout holds: no module imports from a layer above it, and no tracked
file points to a path, module or anchor that does not exist in the repository
(docs/design.md#architecture)."""
from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "indexer_lib"

# the layer order, written once: a module may import from its own layer and those below
LAYERS = ["base", "workload", "engines", "plan", "memory", "timemodel", "fast", "run", "search", "sweep", "ledger",
          "study", "notebook", "cli"]
BASE_MODULES = {"indexer_lib.presets", "indexer_lib.padding", "indexer_lib.refdata", "indexer_lib.checks",
                "indexer_lib.dtypes", "indexer_lib.elementwise", "indexer_lib.aiter_logits",
                "indexer_lib.runmode"}
FACADE = {"indexer_lib", "indexer_lib.__main__"}  # the package's front door, above every layer


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """The layer's rank; ValueError for a module that belongs to no layer."""
    if module in FACADE:
        return len(LAYERS)
    if module in BASE_MODULES:
        return 0
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "indexer_lib" and parts[1] in LAYERS[1:]:
        return LAYERS.index(parts[1])
    raise ValueError(f"{module}: belongs to no layer (add it to a layer's package or to BASE_MODULES)")


def imported_modules(module: str, source: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every indexer_lib import in ``source``, lazy ones included."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            if node.module is None or node.level and not node.module:
                # from . import a, b: each name may be a submodule
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, m) for line, m in found if m == "indexer_lib" or m.startswith("indexer_lib.")]


def resolve(module: str) -> str:
    """The longest prefix of ``module`` that is a file or package of indexer_lib."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        path = REPO.joinpath(*parts[:n])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts[:n])
    raise ValueError(f"{module}: no such module")


def upward_imports(path: Path, source: str) -> list[str]:
    module = module_name(path)
    mine = layer_of(module)
    bad = []
    for line, target in imported_modules(module, source, path.name == "__init__.py"):
        theirs = layer_of(resolve(target))
        if theirs > mine:
            bad.append(f"{path.relative_to(REPO)}:{line}: {module} (layer {LAYERS[mine] if mine < len(LAYERS) else 'facade'}) "
                       f"imports {target} (layer {LAYERS[theirs]})")
    return bad


def test_each_layers_docstring_names_its_rank():
    """A subpackage's docstring that opens with "Layer N," names the rank LAYERS gives it."""
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        name = init.parent.name
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = re.match(r"Layer (\d+),", doc)
        assert match, f"{name}: its docstring opens with its layer ('Layer N, ...')"
        assert int(match.group(1)) == LAYERS.index(name), f"{name} is layer {LAYERS.index(name)}, not {match.group(1)}"


def test_no_module_imports_from_a_layer_above_it():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 40
    bad = []
    for path in files:
        bad += upward_imports(path, path.read_text())
    assert not bad, "imports that go up a layer:\n" + "\n".join(bad)


def test_the_layer_check_catches_an_upward_import():
    plan_module = PACKAGE / "plan" / "strategies.py"
    assert upward_imports(plan_module, "from ..memory import memory_report\n")  # plan -> memory
    assert upward_imports(plan_module, "def f():\n    from ..study import sweep\n")  # lazy, too
    assert upward_imports(PACKAGE / "memory" / "model.py", "import indexer_lib.run.tracer\n")
    assert upward_imports(PACKAGE / "run" / "kernels" / "topk.py", "from ...notebook import plots\n")
    assert not upward_imports(plan_module, "from ..workload import StepBatch\nfrom ..padding import align\n")
    with pytest.raises(ValueError, match="belongs to no layer"):
        layer_of("indexer_lib.somewhere")


def test_every_module_belongs_to_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


# ----------------------------------------------------------------------------------- references

TOP_LEVEL = ("indexer_lib", "notebooks", "scripts", "data", "docs", "tests", ".ci")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".sh", ".yaml", ".yml", ".toml", ".txt", ".csv", ".cfg", ""}
# a repository path as text mentions it: starts at a top-level folder, not inside a longer path
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])(#[\w-]+)?" % "|".join(re.escape(t) for t in TOP_LEVEL))
MODULE_RE = re.compile(r"(?<![\w.])indexer_lib(?:\.[A-Za-z_]\w*)+")
MD_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE_RE = re.compile(r"DESIGN\.md|\.\./shared|/work/shared")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    paths = [REPO / p for p in out.stdout.split("\0") if p]
    return [p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == "run")]


def text_of(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":  # what a person reads: the cells' sources
        nb = json.loads(text)
        text = "\n".join("".join(c["source"]) for c in nb["cells"])
    return text


def anchors(md: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    slugs = set()
    for line in md.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            slugs.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return slugs


def check_target(path: Path, anchor: str | None, where: str) -> list[str]:
    if not path.exists():
        return [f"{where}: {path.relative_to(REPO) if path.is_relative_to(REPO) else path} does not exist"]
    if anchor and path.suffix == ".md" and anchor.lstrip("#") not in anchors(path):
        return [f"{where}: {path.relative_to(REPO)} has no heading for {anchor}"]
    return []


def module_exists(dotted: str) -> bool:
    """A module of the package, or a name defined at the top of one."""
    try:
        module = resolve(dotted)
    except ValueError:
        return False
    rest = dotted[len(module) + 1:].split(".")[0] if dotted != module else ""
    if not rest:
        return True
    path = REPO.joinpath(*module.split("."))
    source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
    tree = ast.parse(source)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return rest in names


def dangling_references(path: Path, text: str) -> list[str]:
    bad = []
    rel = path.relative_to(REPO)
    for i, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{i}"
        if OUTSIDE_RE.search(line):
            bad.append(f"{where}: points outside the repository: {OUTSIDE_RE.search(line).group(0)}")
        for m in PATH_RE.finditer(line):
            bad += check_target(REPO / m.group(1).rstrip("/"), m.group(2), where)
        for m in MODULE_RE.finditer(line):
            if not module_exists(m.group(0)):
                bad.append(f"{where}: no module or name {m.group(0)}")
        if path.suffix in (".md", ".ipynb"):
            for m in MD_LINK_RE.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                file_part, _, anchor = target.partition("#")
                bad += check_target((path.parent / file_part).resolve(), anchor or None, where)
    return bad


def test_no_tracked_file_points_to_a_path_that_does_not_exist():
    files = tracked_files()
    assert any(p.name == "design.md" for p in files) and len(files) > 80
    bad = []
    for path in files:
        if path != Path(__file__):  # this file's own examples point nowhere on purpose
            bad += dangling_references(path, text_of(path))
    assert not bad, "references to nothing:\n" + "\n".join(bad)


def test_the_reference_check_catches_what_it_should():
    here = REPO / "docs" / "design.md"
    outside = ("see " + "DESIGN" + ".md section 6", "read ../" + "shared/research/x.md")
    for line in (*outside,
                 "`indexer_lib/nothing.py`", "docs/design.md#no-such-heading",
                 "`indexer_lib.study.no_such_module`", "`indexer_lib.plan.no_such_name`",
                 "[x](../data/missing.csv)", "[y](design.md#nowhere)"):
        assert dangling_references(here, line), line
    for line in ("`indexer_lib/plan/strategies.py`", "docs/design.md#time-model", "data/field/",
                 "`indexer_lib.memory.make_plan`", "`indexer_lib.run.kernels.deepgemm`",
                 "[r](../data/README.md)", "vllm/v1/attention/backends/mla/indexer.py",
                 "results/default/tables/", "https://github.com/x/y/blob/main/docs/z.md"):
        assert not dangling_references(here, line), line
