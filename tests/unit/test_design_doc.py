"""docs/design.md names only code that exists where it says: every name of a `file.py`: `Name` citation is defined
in that file itself (not imported there, not inherited from a class of another file)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from fellows_fsm.core.vocab import State, Trigger

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SRC = ROOT / "src" / "fellows_fsm"

# The rule. A citation is a backticked file and a colon, `file.py`:. Its names are the backticked identifiers
# (dotted or not, maybe called: `Dispatch.advance(look, now)`) that follow it, up to where it ends: the next citation
# at the same parenthesis level or an outer one, the `)` closing a parenthesis it was opened in, a `;` at its level,
# the end of a sentence at level 0, the end of the table cell, list item or paragraph. The first name right after the
# colon is always a code name; any other is one when the project defines its first part at a module's top level
# (`Executor.tick`, `window_deadline`) and it is no word of the table (a State or a Trigger: `hand_off`,
# `FAILED_TO_GCP`): so SLURM's fields (`StartTime`), ssh options, config keys and builtins are prose.
TOKEN = re.compile(
    r"(?P<cite>`(?P<path>(?:[a-z_]+/)*[a-z_]+\.py)`:)"
    r"|`(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\([^`]*\))?`"
    r"|(?P<other>`[^`\n]*`)"
    r"|(?P<open>\()|(?P<close>\))|(?P<semi>;)|(?P<stop>\.\s+(?=[A-Z])|\|)"
    r"|(?P<end>\n(?=\s*\n|\s*- |\s*\d+\. |#))"
)
FENCED = re.compile(r"^```.*?^```$", re.DOTALL | re.MULTILINE)
TABLE_WORDS = {s.value for s in State} | {s.name for s in State} | {t.value for t in Trigger}


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines (functions, classes, assignments), each with its node."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:  # a name, or a tuple of names (never the names inside ``a.b = ...``)
                for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(name, ast.Name):
                        names.setdefault(name.id, node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def _file(path: str) -> Path:
    return ROOT / path if path.startswith(("tests/", "benchmarks/", "scripts/")) else SRC / path


@cache
def _tree(path: str) -> ast.Module:
    return ast.parse(_file(path).read_text(encoding="utf-8"))


def _instance_attributes(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """The ``self.<name> = ...`` attributes a class's own methods set."""
    return {
        target.attr: node
        for method in cls.body
        if isinstance(method, ast.FunctionDef)
        for node in ast.walk(method)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


def _resolves(path: str, name: str) -> bool:
    """``name`` (a module-level name, or ``Class.member``) is defined in ``path`` itself: in its body, or in a class's
    own body or the attributes its own methods set (a name a class inherits, or a module imports, does not count)."""
    if not _file(path).is_file():
        return False
    scope: ast.AST = _tree(path)
    for part in name.split("."):
        body = getattr(scope, "body", None)
        found = _defined(body) if isinstance(body, list) else {}
        if isinstance(scope, ast.ClassDef):
            found = {**_instance_attributes(scope), **found}
        if part not in found:
            return False
        scope = found[part]
    return True


@cache
def project_names() -> frozenset[str]:
    """Every name a module of the package defines at its top level."""
    return frozenset(
        name for f in SRC.rglob("*.py") for name in _defined(ast.parse(f.read_text(encoding="utf-8")).body)
    )


def citations(text: str) -> list[tuple[str, str]]:
    """Every (file, name) pair the rule above finds in ``text`` (outside fenced code blocks), in order."""
    text = FENCED.sub("\n\n", text)
    pairs: list[tuple[str, str]] = []
    open_citations: list[tuple[int, str]] = []  # (parenthesis level, file), innermost last
    level = 0
    just_cited = False
    for token in TOKEN.finditer(text):
        kind = token.lastgroup
        if kind == "cite":
            while open_citations and open_citations[-1][0] >= level:
                open_citations.pop()
            open_citations.append((level, token["path"]))
        elif kind == "name" and open_citations:
            name = token["name"]
            if just_cited or (name not in TABLE_WORDS and name.split(".")[0] in project_names()):
                pairs.append((open_citations[-1][1], name))
        elif kind == "open":
            level += 1
        elif kind == "close":
            level = max(level - 1, 0)
            while open_citations and open_citations[-1][0] > level:
                open_citations.pop()
        elif kind == "semi":
            while open_citations and open_citations[-1][0] >= level:
                open_citations.pop()
        elif (kind == "stop" and (level == 0 or token.group() == "|")) or kind == "end":
            open_citations, level = [], 0
        # the first name must follow the colon directly (one space): `file.py`: `Name`
        just_cited = kind == "cite" and text[token.end() : token.end() + 2] == " `"
    return pairs


def references() -> list[tuple[str, str]]:
    """Every (file, name) citation of docs/design.md, in order."""
    return citations(DESIGN.read_text(encoding="utf-8"))


def test_design_doc_names_only_code_that_exists() -> None:
    """Each name of each citation is a function, class, method or constant defined in the file it cites."""
    pairs = references()
    assert len(pairs) > 150  # the map is made of them: a rule that found few would check little
    broken = [f"{path}: {name}" for path, name in pairs if not _resolves(path, name)]
    assert broken == []


def test_a_wrong_reference_is_caught() -> None:
    """The check itself: a name that is not there, in a file that is, does not resolve; one that is, does."""
    assert _resolves("driver/executor.py", "Executor.tick")
    assert _resolves("driver/executor.py", "Executor.looked_up")  # set by its own __init__
    assert not _resolves("driver/executor.py", "Executor.no_such_method")
    assert not _resolves("no_such_file.py", "Executor")


def test_a_name_imported_or_inherited_is_not_defined_there() -> None:
    """A name a module imports (``Journal`` in driver/router.py) or a class inherits from a mixin of another file
    (``Journal.release_driver``, DriverLock's) does not resolve in that file; in the defining file it does."""
    assert "Journal" in _file("driver/router.py").read_text(encoding="utf-8")
    assert not _resolves("driver/router.py", "Journal")
    assert not _resolves("journal/store.py", "Journal.release_driver")
    assert _resolves("journal/lock.py", "DriverLock.release_driver")


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        (
            "`driver/executor.py`: `Executor.tick` (`budget`) and `Executor.recall`",
            ["Executor.tick", "Executor.recall"],
        ),
        ("`core/dispatch.py`: `Dispatch.advance(look, now)` returns a `Decision`", ["Dispatch.advance", "Decision"]),
        ("`core/lifecycle.py`: the `TABLE` (`resubmit` from `CANCELLED`, `job_gone`)", ["TABLE", "job_gone"]),
        ("`slurm/observe.py`: `parse_squeue` (`Partition`, `StartTime`)", ["parse_squeue"]),
        ("`a.py`: `x_y`; `b.py`: `Router.poll`, `window_deadline`", ["x_y", "Router.poll", "window_deadline"]),
        ("`a.py`: `Router` (`b.py`: `Executor`) and `Dispatch`", ["Router", "Executor", "Dispatch"]),
        ("`a.py`: `Router` (its `b.py`: `Executor`; `Dispatch`) `Step`", ["Router", "Executor", "Dispatch", "Step"]),
        ("`a.py`: `Router`; then `Dispatch`", ["Router"]),
        ("`a.py`: `Router`. Then `Dispatch`", ["Router"]),
        ("| `a.py`: `Router` | `Dispatch` |", ["Router"]),
        ("`a.py`: `Router`\n\n`Dispatch`", ["Router"]),
        ("`a.py`: `Router`\n- `Dispatch`", ["Router"]),
        ("`a.py`: the `Router`, the `hand_off` row, `FAILED_TO_GCP`", ["Router"]),
        ("```\n`a.py`: `Router`\n```\n`b.py`: `Step`", ["Step"]),
    ],
    ids=[
        "and-more-names",
        "a-call",
        "not-the-first-name",
        "slurm-fields-are-prose",
        "semicolon-ends",
        "inner-citation",
        "inner-semicolon",
        "semicolon-at-its-level",
        "sentence",
        "cell",
        "paragraph",
        "list-item",
        "table-words",
        "fenced-code",
    ],
)
def test_the_rule_finds_every_name_of_a_citation(text: str, pairs: list[str]) -> None:
    """Each citation's names run to where the rule says it ends, and only code names of the project count."""
    found = citations(text)
    assert [name for _, name in found] == pairs
    assert {path for path, _ in found} <= {
        "a.py",
        "b.py",
        "driver/executor.py",
        "core/dispatch.py",
        "core/lifecycle.py",
        "slurm/observe.py",
    }


def test_a_later_name_of_a_citation_is_checked_in_its_file() -> None:
    """A wrong name after the first of a citation is caught: `Executor.recall` is the executor's, not the router's."""
    pairs = citations("`driver/router.py`: `Router.poll` (hands it to `Executor.recall`)")
    assert pairs == [("driver/router.py", "Router.poll"), ("driver/router.py", "Executor.recall")]
    assert [_resolves(path, name) for path, name in pairs] == [True, False]
