"""The docs' checkable claims: the flags reference is the parser's, the models table is the registry's
capabilities, the data table is the dataset registry, the scripts sentence names each model's datasets, and every
test the docs cite as holding a claim exists."""
import os

from tests.conftest import REPO


def test_the_slurm_script_launches_flags_run_py_accepts():
    import shlex
    import subprocess

    from exp.config import parse_args, resolve
    path = os.path.join(REPO, "scripts", "slurm", "pretrain.sbatch")
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    text = open(path).read().replace("\\\n", " ")
    command = shlex.split(text[text.index("srun torchrun"):].splitlines()[0])
    flags = [a.replace('"$CORPUS"', "x").replace("$CORPUS", "x") for a in command[command.index("run.py") + 1:]
             if a != "$@"]
    resolve(parse_args(flags))
