"""The docs' checkable claims: the flags reference is the parser's, the models table is the registry's
capabilities, the data table is the dataset registry, the scripts sentence names each model's datasets, and every
test the docs cite as holding a claim exists."""
import ast
import glob
import os
import re

import models
from data_provider import datasets
from exp.flags import reference_markdown
from scripts.make_scripts import MODELS as LONG_TERM
from scripts.make_scripts import SHORT_TERM
from tests.conftest import REPO

DOCS = {path: open(path).read() for path in [os.path.join(REPO, "README.md"),
                                             *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]}


def test_the_flags_reference_is_generated_from_the_parser():
    with open(os.path.join(REPO, "docs", "flags.md")) as f:
        assert f.read() == reference_markdown(), "regenerate it: python -m exp.flags > docs/flags.md"


def test_the_models_table_is_the_registrys_capabilities():
    """Of the models the project ships (those with paper-setting scripts): a model a user adds to models/ needs
    no README row."""
    readme = DOCS[os.path.join(REPO, "README.md")]
    table = readme[readme.index("| `--model` | paper |"):].split("\n\n")[0].splitlines()[2:]
    rows = {}
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = [c == "✓" for c in cells[2:6]]
    shipped = {*LONG_TERM, *SHORT_TERM}
    assert sorted(rows) == sorted(shipped) and shipped <= set(models.NAMES)
    short_term = readme[readme.index("`scripts/short_term_forecast/<model>_M4.sh` ("):].split(").")[0]
    assert set(re.findall(r"`([a-z_]+)`", short_term)) == set(SHORT_TERM)
    for name, (direct, autoregressive, covariate, marks) in rows.items():
        caps = models.capabilities(name)
        assert (caps.direct, caps.autoregressive, caps.covariate, caps.time_marks) == \
               (direct, autoregressive, covariate, marks), name


def test_the_data_table_names_every_registered_dataset_with_its_file():
    readme = DOCS[os.path.join(REPO, "README.md")]
    table = readme[readme.index("| `--data` | file under"):].split("\n\n")[0].splitlines()[2:]
    named = {}
    for line in table:
        names, files = (re.findall(r"`([^`]+)`", cell) for cell in line.strip("|").split("|")[:2])
        named.update({name: files[min(i, len(files) - 1)] if files else None for i, name in enumerate(names)})
    registry = datasets.registry()
    assert sorted(named) == sorted(registry)
    for name, entry in registry.items():
        assert entry.file is None or named[name].endswith(entry.file), name


def test_every_test_the_docs_cite_exists():
    defined = set()
    for path in glob.glob(os.path.join(REPO, "tests", "**", "*.py"), recursive=True):
        tree = ast.parse(open(path).read())
        defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    text = "\n".join(DOCS.values())
    cited = set(re.findall(r"`(test_[a-z0-9_]+)(?:\.\.\.)?`", text))
    assert len(cited) >= 8, "the table of what is exact under DDP cites the tests that hold it"
    for name in cited:
        abbreviated = f"`{name}...`" in text
        assert any(d.startswith(name) for d in defined) if abbreviated else name in defined, name


def test_the_scaling_tables_are_the_scripts_output():
    from scripts.benchmark.scaling import tables
    assert tables() in DOCS[os.path.join(REPO, "docs", "scaling.md")], \
        "regenerate docs/scaling.md's tables: python -m scripts.benchmark.scaling"


def test_the_scripts_sentence_names_each_models_datasets():
    readme = " ".join(DOCS[os.path.join(REPO, "README.md")].split())
    sentence = readme[readme.index("on the datasets that source sets:"):].split(" They are generated")[0]
    clauses = sentence.split("sets:", 1)[1].split(";")
    everything = set(re.findall(r"\w+", clauses[0])) - {"and"}
    named = {}
    for clause in clauses[1:]:
        who, which = clause.split(":")
        named.update({m: set(re.findall(r"\w+", which)) - {"and"} for m in re.findall(r"`(\w+)`", who)})
    scripts = {}
    for path in glob.glob(os.path.join(REPO, "scripts", "long_term_forecast", "*.sh")):
        model, dataset = os.path.basename(path)[:-3].rsplit("_", 1)
        scripts.setdefault(model, set()).add(dataset)
    assert sorted(scripts) == sorted(LONG_TERM)
    assert {m: named.get(m, everything) for m in scripts} == scripts
