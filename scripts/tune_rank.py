"""One rank of a DDP trial of scripts.tune (--nproc N): the trial's run.py run with its pruning hook.

    python -m torch.distributed.run --nproc_per_node=N -m scripts.tune_rank SPEC.json --ddp <run.py flags>

SPEC.json (written by scripts.tune for the trial): the study's name and storage, the trial's storage id, the
pruner, and the file the main rank writes the outcome to: {"state": "complete", "best": the best validation
loss} or {"state": "pruned", "reason": ...}, with the validation curve. The main rank alone joins the study
(reports each epoch's validation loss and asks the pruner); every rank takes its decision. An error ends the
job like any run.py run (one line, a non-zero exit code) and leaves no outcome.
"""
import json
import os
import sys

import optuna

import run
from scripts import tune


def main(argv: list) -> None:
    with open(argv[0]) as f:
        spec = json.load(f)
    trial = None
    if os.environ.get("RANK", "0") == "0":
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=spec["study"], storage=tune.storage_of(spec["storage"], spec["tune_dir"]),
                                  pruner=tune.make_pruner(spec["pruner"], spec["prune_after"]))
        trial = optuna.trial.Trial(study, spec["trial_id"])
    hook = tune.PruneOnValidation(trial)
    try:
        results = run.cli(argv[1:], callbacks=[hook], passthrough=(optuna.TrialPruned,))
        outcome = {"state": "complete", "best": min(h["vali_loss"] for h in results[0]["history"])}
    except optuna.TrialPruned as e:
        outcome = {"state": "pruned", "reason": str(e)}
        sys.stderr.write(f"{e}\n")  # the trial's log says why it ends there
    if trial is not None:
        with open(spec["outcome"], "w") as f:
            json.dump({**outcome, "curve": hook.curve}, f)
    run._exit(0)  # as run.py leaves (its outputs are written and closed)


if __name__ == "__main__":
    main(sys.argv[1:])
