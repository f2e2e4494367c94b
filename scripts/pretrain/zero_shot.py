"""Pre-train a small Timer-XL on a corpus, then test it zero-shot and 5%-few-shot against the same model trained
from scratch.

    python -m scripts.pretrain.zero_shot --data_root ../shared/datasets --out /data/zeroshot
                                         [--targets ETTh1,ILI] [--steps 4000] [--seed 2021]

For each target dataset: a corpus of generated series (data_provider.corpus_gen) plus every benchmark file under
--data_root except the target's (every channel one series); a Timer-XL pre-trained on it by steps; then on the
target, channel-independent (--univariate): the pretrained weights tested as they are (zero-shot), fine-tuned on a
seeded 5% of the training windows (few-shot), and the same architecture trained from scratch on 5% and on all of
them. Prints the table of test MSE/MAE and writes it, with every command, to OUT/table.md. Runs that finished
are not run again (the framework's run identities), so an interrupted table resumes.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, HERE)

from data_provider import corpus_gen, datasets  # noqa: E402
from utils import cli  # noqa: E402
from utils.errors import ConfigError, TrainingError  # noqa: E402

# (file under --data_root, --data) of the benchmarks a corpus may take
BENCHMARKS = {"ETTh1": "ETT-small/ETTh1.csv", "ILI": "illness/national_illness.csv"}
# per target: lengths in the framework's flags (ILI's 966 weekly rows hold no 672-point window)
TASKS = {"ETTh1": ["--seq_len", "672", "--input_token_len", "96", "--output_token_len", "96"],
         "ILI": ["--seq_len", "36", "--input_token_len", "12", "--output_token_len", "24"]}
MODEL = ["--model", "timer_xl", "--d_model", "128", "--d_ff", "256", "--e_layers", "2", "--n_heads", "4",
         "--dropout", "0.1"]


def corpus_for(target: str, args) -> str:
    """Generated series plus every benchmark file present except the target's."""
    root = os.path.join(args.out, f"corpus_without_{target}")
    if not os.path.isdir(root):
        tmp = root + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        corpus_gen.generate(os.path.join(tmp, "generated"), int(args.generated_points), 400, seed=args.seed)
        for name, path in BENCHMARKS.items():
            if name != target and os.path.isfile(os.path.join(args.data_root, path)):
                os.makedirs(os.path.join(tmp, "benchmarks"), exist_ok=True)
                shutil.copy(os.path.join(args.data_root, path), os.path.join(tmp, "benchmarks"))
        os.rename(tmp, root)
    return root


def run(flags: list, args, log: list) -> dict:
    """One run.py process (trains unless finished, then tests); returns its metrics.json."""
    cmd = [sys.executable, "run.py", *flags, "--seed", str(args.seed), "--resume", "auto",
           "--checkpoints", os.path.join(args.out, "checkpoints"), "--results_dir", os.path.join(args.out, "results")]
    log.append(" ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    if proc.returncode:
        raise TrainingError(f"{cli.error_line(proc.stderr, 'a run failed')} (in: {' '.join(cmd[1:])})")
    line = [ln for ln in proc.stderr.splitlines() if "outputs of" in ln][-1]
    folder = line.split("results ")[1].split(" | ")[0]
    with open(os.path.join(folder, "metrics.json")) as f:
        return json.load(f)


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_root", required=True, type=cli.existing_folder)
    parser.add_argument("--out", required=True)
    parser.add_argument("--targets", default="ETTh1,ILI", help=f"comma list of {', '.join(TASKS)}")
    parser.add_argument("--steps", type=cli.at_least(1), default=4000, help="pre-training optimizer steps (batch 64)")
    parser.add_argument("--generated_points", type=cli.at_least(1.0, float), default=2e7)
    parser.add_argument("--seed", type=int, default=2021)
    args = parser.parse_args(argv)
    for target in args.targets.split(","):  # before any corpus is generated
        if target not in TASKS:
            raise ConfigError(f"--targets {target}: the targets are {', '.join(TASKS)}")
        if not os.path.isfile(os.path.join(args.data_root, BENCHMARKS[target])):
            raise ConfigError(f"--targets {target}: no {BENCHMARKS[target]} under --data_root {args.data_root}")
    os.makedirs(args.out, exist_ok=True)
    rows, log = [], []
    for target in args.targets.split(","):
        task = TASKS[target]
        pretrained = run(["--data", "corpus", "--root_path", corpus_for(target, args), *MODEL, *task,
                          "--model_id", f"pretrain_for_{target}", "--batch_size", "64",
                          "--train_steps", str(args.steps), "--val_every", str(args.steps // 4),
                          "--val_windows", "4096", "--val_windows_end", "4096", "--test_windows", "4096",
                          "--lradj", "warmup_cosine", "--learning_rate", "1e-3", "--patience", "4"], args, log)
        weights = pretrained["checkpoint"]
        entry = datasets.registry()[target]
        data = ["--data", target, "--root_path", os.path.join(args.data_root, os.path.dirname(BENCHMARKS[target])),
                "--univariate", *MODEL, *task, "--batch_size", "32", "--learning_rate", "1e-4", "--lradj", "type1",
                "--train_epochs", "10", "--patience", "3"]
        assert entry.file == os.path.basename(BENCHMARKS[target])
        cases = {"zero-shot": ("zeroshot", ["--is_training", "0", "--pretrain_model_path", weights]),
                 "few-shot 5%": ("fewshot5", ["--adaptation", "--pretrain_model_path", weights,
                                              "--subset_rand_ratio", "0.05"]),
                 "scratch 5%": ("scratch5", ["--subset_rand_ratio", "0.05"]),
                 "scratch 100%": ("scratch", [])}
        for case, (model_id, extra) in cases.items():
            m = run(data + ["--model_id", model_id] + extra, args, log)
            rows.append((target, case, m["test_pred_len"], m["mse"], m["mae"], m["n_test_windows"],
                         m.get("epochs_run")))
    table = ["| target | model | horizon | MSE | MAE | test windows | epochs |", "|---|---|---|---|---|---|---|"]
    table += [f"| {t} | {c} | {h} | {mse:.4f} | {mae:.4f} | {n} | {e if e is not None else '—'} |"
              for t, c, h, mse, mae, n, e in rows]
    text = "\n".join(table) + "\n\nCommands:\n\n```\n" + "\n".join(log) + "\n```\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    cli.run(main)
