"""A run's identity: what enters it, one folder per identity, and the checks on what a checkpoint was trained as."""
import os
import pathlib

from data_provider import synthetic
from exp.config import parse_args, resolve
from exp.flags import parser
from exp.identity import make_identity, run_config
from utils.fingerprints import config_hash, content_fingerprint, file_fingerprint

DLINEAR = ["--model", "dlinear", "--nonautoregressive"]


class _Data:
    """What make_identity reads of the data."""
    name, file, fingerprint = "tiny", "tiny.csv", "46751-12beda9c50ac9dc0"


def _identity(flags, world_size=1):
    args = resolve(parse_args(flags))
    return make_identity(args, _Data, world_size, args.seed)


def test_every_flag_has_a_role_and_only_result_changing_flags_change_the_identity(tiny_args):
    p = parser()
    assert set(p.roles) == {a.dest for a in p._actions if a.dest != "help"}
    base = _identity(tiny_args + DLINEAR)
    assert "dm" not in base.setting and "d_model" not in base.config["model"], "DLinear has no d_model"
    assert set(base.config["model"]) == {"model", "moving_avg", "individual", "use_norm"}
    for same in (["--device", "cuda"], ["--results_dir", "x"], ["--checkpoints", "y"], ["--visualize"],
                 ["--compile"], ["--zero"], ["--plot_channel", "1"], ["--d_model", "64"], ["--dist_timeout", "5"],
                 ["--val_windows", "0"], ["--train_steps", "0"], ["--corpus_norm", "window"]):
        assert _identity(tiny_args + DLINEAR + same) == base, same
    for other in (["--moving_avg", "5"], ["--use_norm"], ["--individual"], ["--lradj", "constant"],
                  ["--accum_steps", "2"], ["--train_epochs", "3"], ["--learning_rate", "0.01"],
                  ["--batch_size", "8"], ["--target", "cov0"], ["--univariate"], ["--use_amp"],
                  ["--use_amp", "--amp_dtype", "fp16"],
                  ["--val_windows", "20"], ["--train_steps", "30"], ["--train_steps", "30", "--val_every", "10"]):
        changed = _identity(tiny_args + DLINEAR + other)
        assert changed.config_id != base.config_id and changed.setting != base.setting, other
    steps = _identity(tiny_args + DLINEAR + ["--train_steps", "30", "--val_every", "10"])
    assert _identity(tiny_args + DLINEAR + ["--train_steps", "30", "--val_every", "10", "--save_every", "4"]) == steps
    seeded = _identity(tiny_args + DLINEAR + ["--seed", "7"])
    assert seeded.config_id == base.config_id and seeded.setting != base.setting, "seeds share a configuration"
    assert _identity(tiny_args + DLINEAR, world_size=2).config_id != base.config_id, "2 x B is another global batch"
    assert _identity(tiny_args + DLINEAR + ["--pct_start", "0.3"]) == base, "type1 does not read pct_start"
    one_cycle = _identity(tiny_args + DLINEAR + ["--lradj", "TST"])
    assert one_cycle.config["training"]["pct_start"] == 0.2
    assert one_cycle.config["training"]["lradj_revision"] == 2, "TST's beta1 cycling changed its results"
    assert "lradj_revision" not in base.config["training"], "a first revision adds nothing"
    assert _identity(tiny_args + DLINEAR + ["--lradj", "TST", "--pct_start", "0.3"]).config_id != one_cycle.config_id
    timer_xl = _identity(tiny_args)
    assert timer_xl.config["model"]["d_model"] == 16 and "dropout" in timer_xl.config["model"]
    assert _identity(tiny_args + ["--dropout", "0.3"]).config_id != timer_xl.config_id


def test_the_synthetic_default_has_the_fingerprint_of_the_file_it_writes(tmp_path):
    text = synthetic.csv_text(synthetic.generate(length=300, n_covariates=1, seed=3))
    (tmp_path / "s.csv").write_bytes(text.encode())
    assert content_fingerprint(text.encode()) == file_fingerprint(str(tmp_path / "s.csv"))
    (tmp_path / "s.csv").write_text(text.replace("1", "2", 1))
    assert file_fingerprint(str(tmp_path / "s.csv")) != content_fingerprint(text.encode())


def test_a_fingerprint_reads_every_byte_and_is_cached_until_the_file_changes(tmp_path, fingerprint_cache):
    path = tmp_path / "d.bin"
    data = bytearray(os.urandom(3 << 20))
    path.write_bytes(bytes(data))
    first = file_fingerprint(str(path))
    assert first == content_fingerprint(bytes(data))
    (entry,) = [e for e in pathlib.Path(fingerprint_cache).rglob("*") if e.is_file() and e.read_text() == first]
    entry.write_text("cached")  # a lookup of the unchanged file answers from the cache, without reading it
    assert file_fingerprint(str(path)) == "cached"
    before = os.stat(path)
    data[len(data) // 2] ^= 0x01  # the same size, and the modification time set back
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert file_fingerprint(str(path)) == content_fingerprint(bytes(data)) != first


def test_a_hyperparameter_added_later_enters_the_identity_only_off_its_default():
    """Timer-XL's attention_form came after its runs: at its default ("paper", the model as it was) those runs keep
    their identity; the other form is another model."""
    flags = ["--model", "timer_xl", "--seq_len", "96", "--input_token_len", "24", "--output_token_len", "24"]
    before = _identity(flags)
    assert "attention_form" not in before.config["model"]
    assert _identity(flags + ["--attention_form", "paper"]).config_id == before.config_id
    official = _identity(flags + ["--attention_form", "openltm"])
    assert official.config["model"]["attention_form"] == "openltm" and official.config_id != before.config_id
# The data files' fingerprints when the ledger's runs were recorded: the real ETTh1 and ILI files read with the
# scheme of that time (size, SHA-256 of the first and last 64 KiB). A run's config_id is a hash of its flags and
# of this, so the flags of those runs, resolved by today's code, must give back the config_id in their folder's name.
# the data files the ledger's runs read: ILI's copy of the N-HiTS runs (5460ffa) and ETTh1's of the xPatch run
# (23b2d83) differ from the earlier runs' in content, not size
RECORDED_FINGERPRINTS = {"ETTh1": ("2589657-a41d4e3ea7ffa95b", "2589657-f18de3ad269cef59"),
                         "ILI": ("66653-2454a58aa8ca4aac", "66653-8594cecb98c6f2f9")}


def _config_id(argv, file, fingerprint, world_size=1):
    config = run_config(resolve(parse_args(argv)), file, fingerprint, world_size)
    del config["training"]["seed"]
    return config_hash(config)


def test_the_ledgers_runs_keep_their_identities():
    """Every ledger run of a current paper setting (their scripts' flags, scripts/make_scripts.py), and runs of a
    dialect and by steps whose config_id was recorded when this test was written: a refactor of flags, resolution or
    identity that changes one would split a run's seeds from their predecessors."""
    from analysis import report
    from data_provider.factory import data_file
    from scripts.make_scripts import run_flags
    settings = report.load_settings(report.DEFAULT_SETTINGS)
    checked = 0
    for row in report.load_ledger(report.DEFAULT_LEDGER):
        key = (row["model"], row["dataset"], row["horizon"], row["protocol"])
        if row["dataset"] not in RECORDED_FINGERPRINTS or "/" not in row["source"] or key not in settings \
                or report.setting_id(settings[key]) != row["setting_id"]:
            continue  # recovered from the docs (no run folder), or a setting the scripts no longer hold
        argv = run_flags(*key[:3])
        file = os.path.basename(data_file(parse_args(argv)))
        config_ids = [_config_id(argv, file, f) for f in RECORDED_FINGERPRINTS[row["dataset"]]]
        assert any(f"_{config_id}_s" in row["source"] for config_id in config_ids), (key, row["source"], config_ids)
        checked += 1
    assert checked >= 190
    from tests.unit.test_dialects import TSLIB_SCRIPTS
    for model, config_id in (("PatchTST", "e2a589325c"), ("TimeMixer", "e936019a88"), ("Informer", "2a3e4006a7")):
        assert _config_id(TSLIB_SCRIPTS[model].format(root="/x").replace("'", "").split(), "f.csv", "123-abc",
                          2) == config_id, model
    steps = ["--data", "custom", "--root_path", "/x", "--data_path", "f.csv", "--seq_len", "48", "--input_token_len",
             "16", "--output_token_len", "16", "--d_model", "16", "--e_layers", "1", "--train_steps", "30",
             "--val_every", "10", "--save_every", "4", "--lradj", "warmup_cosine", "--val_windows", "20"]
    assert _config_id(steps, "f.csv", "123-abc", 2) == "7c7d8fb7f5"


def test_a_revised_protocol_split_enters_the_identities_of_the_runs_it_changes_and_no_others():
    """TFB's split of ETT became its first 20 months (revision 2): an ETT run under it is no longer the run that split
    the whole file, while ILI's split, unchanged, keeps its runs' identities (and TSLib's protocol has no revision)."""
    def task(data, protocol):
        argv = ["--data", data, "--protocol", protocol, "--seq_len", "96", "--output_token_len", "96"]
        return run_config(resolve(parse_args(argv)), "f.csv", "1-0", 1)["task"]
    assert task("ETTh1", "tfb")["protocol_revision"] == 2 and task("ETTm2", "tfb")["protocol_revision"] == 2
    assert "protocol_revision" not in task("ILI", "tfb") and "protocol_revision" not in task("ETTh1", "tslib")
