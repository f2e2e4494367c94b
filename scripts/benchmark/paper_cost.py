"""What a paper-setting run costs on this machine, before spending it: each model's paper script
(scripts/make_scripts.py, as `scripts.sweep --paper` runs it) is built on the real dataset and a few of its
training steps and evaluation batches are timed through our loop; the per-epoch and whole-run figures follow.

    python -m scripts.benchmark.paper_cost --models timesnet,autoformer --data_root ../shared/datasets
                                           [--dataset ETTh1] [--horizons 96,720] [--steps 6] [--threads 1]
                                           [--use_amp]

--threads 1 is what a `scripts.sweep --threads 1` cell gets. "Run at most" is every epoch the script allows
(validation and the per-epoch test included) plus the final test; early stopping ends most runs sooner.
Numbers only; nothing is asserted. Measured figures go in docs/reproducing.md with the command.
"""
import argparse

import torch

from exp.evaluator import ROW
from scripts.benchmark.throughput import exp_of, limited, ours, timed
from scripts.sweep import paper_cells
from utils import cli
from utils.process import prepare_training_process


def seconds_per_batch(exp, name: str, batches: int) -> float:
    """Seconds of one batch of the evaluation `name` (exp.evaluator's; the mean over its first `batches`, after one
    warm-up batch)."""
    evaluator, full, model = exp.evaluator, exp.evaluator.loaders[name], exp.running.raw

    def score(n: int) -> None:
        evaluator.loaders[name] = limited(full, n)
        evaluator.mean_loss(model, name)

    score(1)
    seconds = timed(lambda: score(batches), exp.env.device)
    evaluator.loaders[name] = full
    return seconds / len(limited(full, batches))


def cost(argv: list, steps: int, device: torch.device) -> dict:
    exp, args = exp_of(argv, device)
    loader, loaders = exp.trainer.loader, exp.evaluator.loaders
    step = ours(exp, steps)[0] / len(limited(loader, steps))  # our loop, after its warm-up steps
    eval_epoch = sum(seconds_per_batch(exp, name, steps) * len(loaders[name]) for name in ROW if name in loaders)
    final_test = seconds_per_batch(exp, "test", steps) * len(loaders["test"])
    steps_per_epoch = len(loader) // args.accum_steps
    epochs = -(-args.train_steps // steps_per_epoch) if args.train_steps else args.train_epochs
    return {"parameters": sum(p.numel() for p in exp.running.model.parameters()), "step": step,
            "steps_per_epoch": steps_per_epoch, "train_epoch": step * steps_per_epoch, "eval_epoch": eval_epoch,
            "epochs": epochs, "run_at_most": epochs * (step * steps_per_epoch + eval_epoch) + final_test}


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", required=True, help="comma list of models with paper settings")
    p.add_argument("--dataset", default="ETTh1")
    p.add_argument("--horizons", type=cli.int_list, help="comma list (default: the dataset's benchmark horizons)")
    p.add_argument("--data_root", default="./dataset", type=cli.existing_folder,
                   help="folder of the benchmark datasets")
    p.add_argument("--steps", type=cli.at_least(1), default=6, help="training steps (and evaluation batches) timed")
    p.add_argument("--threads", type=cli.at_least(1), default=None, help="torch threads (default: torch's)")
    p.add_argument("--use_amp", action="store_true", help="time the runs with --use_amp added")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args(argv)
    prepare_training_process()  # as run.py does: its runs are what is being costed
    if a.threads:
        torch.set_num_threads(a.threads)
    cells, notes = paper_cells(a.models.split(","), [a.dataset], a.data_root, a.horizons)
    for note in notes:
        print(note)
    print(f"{torch.get_num_threads()} threads, device {a.device}{', --use_amp' if a.use_amp else ''}; "
          f"{a.steps} steps timed per run")
    print("| model | horizon | parameters | s/step | steps/epoch | train min/epoch | eval min/epoch | epochs "
          "| run at most (h) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for argv in cells:
        c = cost(argv + (["--use_amp"] if a.use_amp else []), a.steps, torch.device(a.device))
        horizon_flag = "--test_pred_len" if "--test_pred_len" in argv else "--output_token_len"  # rolled / direct
        model, horizon = argv[argv.index("--model") + 1], argv[argv.index(horizon_flag) + 1]
        # three significant digits: the figures span milliseconds (a GPU, a linear model) to hours
        print(f"| {model} | {horizon} | {c['parameters']:,} | {c['step']:.3g} | {c['steps_per_epoch']} "
              f"| {c['train_epoch'] / 60:.3g} | {c['eval_epoch'] / 60:.3g} | {c['epochs']} "
              f"| {c['run_at_most'] / 3600:.3g} |", flush=True)


if __name__ == "__main__":
    cli.run(main)
