"""The README's checkable claims: its flag tables are the parser's flags and defaults, and every test it cites
as holding a claim exists."""
import ast
import os
import re

from exp.flags import parser
from tests.conftest import REPO

README = open(os.path.join(REPO, "README.md")).read()


def _flag_rows() -> dict:
    """flag -> its default cell, from the tables of the README's flag reference."""
    section = README[README.index("## Flag reference"):]
    section = section[:section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `(--[a-z_]+)` \| (.*?) \|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} appears twice"
            rows[match.group(1)] = match.group(2)
    return rows


def _matches(cell: str, default) -> bool:
    if default is None:  # derived from another flag, or absent: said in words, not as a value
        return not re.fullmatch(r"`[^`]*`", cell)
    if isinstance(default, bool):
        return cell == ("on" if default else "off")
    value = cell.strip("`")
    if isinstance(default, (int, float)):
        return re.fullmatch(r"[-0-9.e]+", value) is not None and float(value) == default
    return value == default


def test_the_flag_reference_lists_every_flag_with_its_default():
    rows = _flag_rows()
    actions = {a.option_strings[0]: a for a in parser()._actions if a.option_strings[0] != "-h"}
    assert sorted(rows) == sorted(actions)
    for flag, action in actions.items():
        assert _matches(rows[flag], action.default), (flag, rows[flag], action.default)


def test_every_test_the_readme_cites_exists():
    defined = set()
    for name in os.listdir(os.path.join(REPO, "tests")):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(REPO, "tests", name)).read())
            defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    cited = set(re.findall(r"`(test_[a-z0-9_]+)(?:\.\.\.)?`", README))
    assert cited, "the README cites the tests that hold its claims"
    for name in cited:
        abbreviated = f"`{name}...`" in README
        assert any(d.startswith(name) for d in defined) if abbreviated else name in defined, name
