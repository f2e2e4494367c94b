"""A run's identity, where its outputs live, and what it may resume or test.

Identity: every flag of the configuration's tag, model, task, data and training sections (exp/flags.py), with the
data file entering as its name and content fingerprint and pretrained weights as their fingerprint. Only the chosen
model's own hyper-parameters count, input_token_len only where it matters, and what was added after runs were
recorded only off the value those runs had (added_later), so that they keep their identity. The run's name keeps a
readable prefix (model_id, model, data, features, mode, lengths, des), then `config_id` (a short hash of
the identity without the seed: the seeds of one configuration share it) and the seed.

One identity is one folder under --checkpoints and one under --results_dir, never shared by two runs:
  checkpoints/<run>/checkpoint.pth, last.pth, run.json     results/<run>/history.csv, tensorboard/
                                                           results/<run>/<test>/metrics.json (tp96, ...)
A finished run is not trained again unless asked (--overwrite), an unfinished one continues only when asked
(--resume auto), and a checkpoint is tested or resumed only by a run of the same model, task and data.
"""
import glob
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass

import models
from data_provider import corpus, protocols
from data_provider.factory import DataBundle, feature_set
from exp.flags import later_flags, model_hparams, roles, uses_input_tokens, zero_shot
from utils import checkpoint, schedules
from utils.errors import ConfigError
from utils.files import write_atomic
from utils.fingerprints import config_hash, differences, file_fingerprint, tree_fingerprint

log = logging.getLogger(__name__)
CHECKPOINT_SECTIONS = ("model", "task", "data")  # what a tested or resumed checkpoint must share with the run
RECORD = "run.json"


@dataclass(frozen=True)
class RunIdentity:
    setting: str    # the run's folder name
    config_id: str  # hash of the configuration without the seed: what repeated seeds have in common
    seed: int
    config: dict    # section (tag, model, task, data, training) -> flag -> value


@dataclass(frozen=True)
class RunPlan:
    identity: RunIdentity
    checkpoint_dir: str
    results_dir: str
    test: str                # the test's name: tp<horizon>, with the dropped-window protocol when used
    train: bool              # False: only test (--is_training 0, or a finished run under --resume auto)
    resume_from: str | None  # a full checkpoint to continue training from
    start_clean: bool        # remove this run's earlier checkpoints and results before it starts
    test_checkpoint: str

    @property
    def best_path(self) -> str:
        return os.path.join(self.checkpoint_dir, "checkpoint.pth")

    @property
    def last_path(self) -> str:
        return os.path.join(self.checkpoint_dir, "last.pth")

    def digest(self) -> str:
        """What every rank must have decided alike (checkpoints and data on storage all nodes see)."""
        return f"{self.identity.setting}|{self.train}|{self.resume_from}|{self.start_clean}|{self.test_checkpoint}"


def features_code(args) -> str:
    """M: multivariate, MS: covariates -> target, S: the target alone, U: every channel its own series."""
    return "U" if args.univariate else "MS" if args.covariate else "S" if args.target_only else "M"


IDENTITY_SECTIONS = ("tag", "model", "task", "data", "training")
# Model.revision, Schedule.revision and Protocol.revision: raised when a change to the code changes results; 1 is the
# code as it was when revisions began, which added nothing to identities
FIRST_REVISIONS = {"revision": 1, "lradj_revision": 1, "protocol_revision": 1}


def added_later(model: str) -> dict:
    """What entered run identities after runs were recorded, with the value those runs had: the flags declared
    later=True (exp/flags.py) and the model's hyper-parameters declared hparam(later=True) at their defaults, and the
    revisions at their first. An entry at that value stays out of a run's identity, so the earlier runs keep theirs."""
    return {**later_flags(), **models.later_hyperparameters(model), **FIRST_REVISIONS}


def _as_json(value):
    """A value as JSON records it: a tuple as a list, so a recorded identity compares equal to a computed one."""
    return list(value) if isinstance(value, tuple) else value


def _as_recorded(entries: dict, later: dict) -> dict:
    """The entries as JSON records them, without those at the value they had before they entered identities."""
    return {name: _as_json(value) for name, value in entries.items()
            if name not in later or _as_json(later[name]) != _as_json(value)}


def run_config(args, file: str, fingerprint: str | None, world_size: int) -> dict:
    """The canonical configuration of a run (seed included), by section; the data enters as its file's name and
    content fingerprint. The world size is part of training: with the same per-rank flags it sets the global batch,
    the scaled learning rate and the ranks' random streams."""
    config = {section: {} for section in IDENTITY_SECTIONS}
    schedule = schedules.registry()[args.lradj]
    read_by_schedules = {flag for s in schedules.registry().values() for flag in s.flags}
    for name, section in roles().items():
        if section in ("tag", "task", "training") and (name != "input_token_len" or uses_input_tokens(args)) \
                and (name not in read_by_schedules or name in schedule.flags):
            config[section][name] = getattr(args, name)
    config["training"]["lradj_revision"] = schedule.revision
    config["task"]["protocol_revision"] = protocols.registry()[args.protocol].revision(args.data)
    config["model"] = model_section(args)
    config["data"] = _data_section(args, file, fingerprint)
    if zero_shot(args):  # nothing is trained: the weights, and what the loss reads of them, are what the test is
        config["training"] = {"loss": args.loss, "quantiles": args.quantiles, **(
            {"zero_shot_from": file_fingerprint(args.pretrain_model_path)} if args.pretrained is None
            else {"zero_shot_from_published": tree_fingerprint(args.pretrained)})}
    else:
        config["training"]["pretrain_model_path"] = \
            file_fingerprint(args.pretrain_model_path) if args.adaptation else None
        config["training"]["pretrained"] = tree_fingerprint(args.pretrained) if args.pretrained else None
        config["training"]["world_size"] = world_size
    later = added_later(args.model)
    return {section: _as_recorded(entries, later) for section, entries in config.items()}


def _data_section(args, file: str, fingerprint: str | None) -> dict:
    section = {"data": args.data, "target": args.target, "file": file, "fingerprint": fingerprint}
    if args.data == corpus.NAME:
        section["corpus_norm"] = args.corpus_norm
    section.update(date_format=args.date_format, dayfirst=args.dayfirst, fill_missing=args.fill_missing,
                   seasonal_patterns=args.seasonal_patterns)
    if args.freq is not None and models.capabilities(args.model).time_marks:
        section["time_features"] = feature_set(args.freq)  # only models that read them
    return section


def make_identity(args, data: DataBundle, world_size: int, seed: int) -> RunIdentity:
    config = run_config(args, data.file, data.fingerprint, world_size)
    config["training"]["seed"] = seed
    without_seed = {**config, "training": {k: v for k, v in config["training"].items() if k != "seed"}}
    config_id = config_hash(without_seed)
    mode = "direct" if args.nonautoregressive else "ar"
    lengths = f"it{args.input_token_len}_ot{args.output_token_len}" if uses_input_tokens(args) \
        else f"pl{args.output_token_len}"
    setting = (f"{args.model_id}_{args.model}_{data.name}_{features_code(args)}_{mode}_sl{args.seq_len}_{lengths}"
               f"_{args.des}_{config_id}_s{seed}")
    return RunIdentity(setting, config_id, seed, config)


def test_name(args, world_size: int) -> str:
    """tp<horizon>; with --test_windows, the size of the subset tested; with --num_samples, the samples per window;
    with --test_drop_last, the global batch whose incomplete last batch was dropped."""
    name = f"tp{args.test_pred_len}"
    name = f"{name}_w{args.test_windows}" if args.test_windows else name
    name = f"{name}_s{args.num_samples}" if args.num_samples else name
    return f"{name}_droplast{args.batch_size * world_size}" if args.test_drop_last else name


# ---- checkpoints: what they were trained as ------------------------------------------------------------
def recorded_identity(path: str) -> RunIdentity:
    """The identity a checkpoint of this framework records (read without loading its tensors)."""
    state = checkpoint.load(path, mmap=True)
    if not isinstance(state.get("identity"), dict):
        raise ConfigError(f"{path} records no run configuration (a plain state dict, or written before run "
                          "identities): retrain it, or start from its weights with --adaptation")
    return RunIdentity(**state["identity"])


def check_checkpoint(path: str, recorded: RunIdentity, current: dict, sections=CHECKPOINT_SECTIONS,
                     purpose: str = "test") -> None:
    """One line listing every flag in `sections` whose value differs between a checkpoint and this run."""
    found = differences(recorded.config, current, sections)
    if found:
        raise ConfigError(f"cannot {purpose} {path}: it was trained with other flags: {'; '.join(found)}")


def adopt_checkpoint(draft) -> RunIdentity:
    """--test_dir: test that checkpoint as it was trained. Its tag, model and task flags and its seed replace those of
    the draft of this run's configuration (exp/config.py; the data flags stay, and are checked against it once the
    data is loaded). An entry added later that it does not record had the value that kept it out."""
    path = os.path.join(draft.checkpoints, draft.test_dir, draft.test_file_name)
    if not os.path.isfile(path):
        raise ConfigError(f"--test_dir: no checkpoint at {path}")
    recorded = recorded_identity(path)
    model = recorded.config["model"]
    if model.get("revision", 1) != models.revision(model["model"]):
        raise ConfigError(f"--test_dir: {path} holds {model['model']} revision {model.get('revision', 1)}, this code "
                          f"is revision {models.revision(model['model'])}: its results would not be the run's")
    later = added_later(model["model"])
    changed = []
    for section in ("tag", "model", "task"):
        unrecorded = {name: value for name, value in later.items() if roles().get(name) == section}
        for name, value in {**unrecorded, **recorded.config[section]}.items():
            if name not in roles():
                continue  # the revision, checked above
            if getattr(draft, name, None) != value:
                changed.append(f"{name} {value}")
            setattr(draft, name, value)
    draft.seed = recorded.seed
    _adopt_fine_tuning(draft, recorded.config["training"], path)
    if changed:
        log.info("testing %s as it was trained: %s", path, ", ".join(changed))
    return recorded


def _adopt_fine_tuning(draft, training: dict, path: str) -> None:
    """A run fine-tuned from a published checkpoint is tested on those weights, with the parts it trained (its
    checkpoint holds those alone): --pretrained must name the checkpoint it was fine-tuned from, whose fingerprint
    it records, and --finetune and LoRA's flags are the run's."""
    recorded = training.get("pretrained")
    if recorded is None and draft.pretrained is not None:
        raise ConfigError(f"--test_dir: {path} was not fine-tuned from a published checkpoint; drop --pretrained")
    if recorded is None:
        return
    if draft.pretrained is None:
        raise ConfigError(f"--test_dir: {path} was fine-tuned from a published checkpoint (fingerprint {recorded}): "
                          "name it with --pretrained")
    found = tree_fingerprint(draft.pretrained) if os.path.exists(draft.pretrained) else "no such file or folder"
    if found != recorded:
        raise ConfigError(f"--test_dir: {path} was fine-tuned from the published checkpoint {recorded}; --pretrained "
                          f"{draft.pretrained} is {found}")
    for name in ("finetune", "lora_rank", "lora_alpha"):
        setattr(draft, name, training.get(name, later_flags()[name]))


def _record(checkpoint_dir: str) -> dict | None:
    path = os.path.join(checkpoint_dir, RECORD)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_record(checkpoint_dir: str, identity: RunIdentity, **status) -> None:
    """run.json: the run's identity and its progress (status 'training' or 'trained', epochs done)."""
    text = json.dumps({**asdict(identity), **status}, indent=2) + "\n"
    write_atomic(os.path.join(checkpoint_dir, RECORD), lambda f: f.write(text.encode()))


def _recorded_runs(root: str) -> list:
    """The run.json of every run under a --checkpoints folder, by run name."""
    records = []
    for path in sorted(glob.glob(os.path.join(root, "*", RECORD))):
        with open(path) as f:
            records.append(json.load(f))
    return records


def _same_model_and_data(root: str, config: dict) -> list:
    """Runs under root of the same model on the same data, as 'run (its flags -> this run's)'."""
    return [f"{other['setting']} ({'; '.join(differences(other['config'], config))})" for other in _recorded_runs(root)
            if other["config"]["model"]["model"] == config["model"]["model"] and other["config"]["data"] == config["data"]]


# ---- planning each repetition ------------------------------------------------------------------------
def plan_runs(args, data: DataBundle, world_size: int, adopted: RunIdentity | None = None,
              lock=lambda setting: None) -> list:
    """One RunPlan per repetition (repetition i: seed + i), decided before any rank trains. lock(setting) is
    called before a run's folders are read (utils/runlock.py: the main rank's lock for the run's life)."""
    test = test_name(args, world_size)
    plans = []
    for itr in range(args.itr):
        identity = adopted or make_identity(args, data, world_size, args.seed + itr)
        testing_trained = not args.is_training and not zero_shot(args)
        if testing_trained and not adopted:
            identity = _trained_at_another_world_size(args, identity)
        lock(identity.setting)
        checkpoint_dir = os.path.join(args.checkpoints, identity.setting)
        results_dir = os.path.join(args.results_dir, identity.setting)
        if args.is_training:
            train, resume_from, start_clean = _training_plan(args, identity, checkpoint_dir)
            test_checkpoint = os.path.join(checkpoint_dir, "checkpoint.pth")
        elif testing_trained:
            train, resume_from, start_clean = False, None, False
            test_checkpoint = _test_checkpoint(args, data, identity, checkpoint_dir, adopted is not None,
                                               world_size)
        else:  # zero-shot: the pretrained weights build_model loaded are tested as they are
            train, resume_from, start_clean, test_checkpoint = False, None, False, None
        plans.append(RunPlan(identity, checkpoint_dir, results_dir, test, train, resume_from, start_clean,
                             test_checkpoint))
    return plans


def _training_plan(args, identity: RunIdentity, checkpoint_dir: str) -> tuple:
    """(train, resume_from, start_clean) for a training run, from what its folder holds."""
    record, last = _record(checkpoint_dir), os.path.join(checkpoint_dir, "last.pth")
    finished = record is not None and record.get("status") == "trained"
    unfinished = not finished and os.path.isfile(last)
    explicit = args.resume not in (None, "auto")
    if explicit:
        check_checkpoint(args.resume, recorded_identity(args.resume), identity.config, purpose="resume")
    if args.overwrite:
        return True, args.resume if explicit else None, True
    results = os.path.join(args.results_dir, identity.setting)
    if record is None and not unfinished and glob.glob(os.path.join(results, "*", "metrics.json")):
        # a fresh start would clear or overwrite another run's results: one trained with other --checkpoints
        raise ConfigError(f"{results} holds the tested results of this configuration, but {checkpoint_dir} does "
                          "not hold its checkpoints: pass the --checkpoints it was trained with (--resume auto then "
                          "tests it again), --overwrite trains it again, another --des keeps both")
    own_last = explicit and os.path.isfile(last) and os.path.samefile(args.resume, last)
    if args.resume == "auto" or own_last:
        if finished:
            log.info("%s has finished training: testing its best checkpoint again", identity.setting)
            return False, None, False
        return True, last if unfinished else None, not unfinished
    if finished:
        raise ConfigError(f"this run has already finished: {checkpoint_dir} (results in "
                          f"{os.path.join(args.results_dir, identity.setting)}); --resume auto tests it again, "
                          "--overwrite trains it again, another --des keeps both")
    if unfinished:
        done = record and record.get("epochs_done")
        progress = f"{done} of {args.train_epochs} epochs" if not args.train_steps else \
            f"{done} of {-(-args.train_steps // (args.val_every or args.train_steps))} validations"
        raise ConfigError(f"an unfinished run of this configuration is in {checkpoint_dir} ({progress} done): "
                          "--resume auto continues it, --overwrite starts it again")
    if explicit:
        return True, args.resume, record is not None
    return True, None, record is not None  # an attempt that saved no epoch leaves nothing worth keeping


def _trained_at_another_world_size(args, identity: RunIdentity) -> RunIdentity:
    """A test-only run finds its configuration also where it was trained on another number of processes (the test
    scores the same at any world size); with none or several such runs it stays what the flags say."""
    if os.path.isfile(os.path.join(args.checkpoints, identity.setting, args.test_file_name)):
        return identity

    def but_world_size(config: dict) -> dict:
        return {**config, "training": {k: v for k, v in config["training"].items() if k != "world_size"}}

    found = [RunIdentity(**{k: other[k] for k in ("setting", "config_id", "seed", "config")})
             for other in _recorded_runs(args.checkpoints)
             if but_world_size(other["config"]) == but_world_size(identity.config)]
    if len(found) != 1:
        return identity
    log.info("testing %s, trained on %d processes", found[0].setting, found[0].config["training"]["world_size"])
    return found[0]


def _test_checkpoint(args, data: DataBundle, identity: RunIdentity, checkpoint_dir: str, adopted: bool,
                     world_size: int) -> str:
    path = os.path.join(checkpoint_dir, args.test_file_name)
    if not os.path.isfile(path):
        hint = _same_model_and_data(args.checkpoints, identity.config)
        raise ConfigError(f"--is_training 0 but no checkpoint at {path}; "
                          + (f"runs of this model on this data: {', '.join(hint[:3])}; test one as it was trained "
                             "with --test_dir" if hint else
                             "train this configuration first, or point --test_dir at a run folder"))
    current = run_config(args, data.file, data.fingerprint, world_size) if adopted else identity.config
    check_checkpoint(path, recorded_identity(path), current, ("tag",) + CHECKPOINT_SECTIONS if not adopted
                     else ("data",))
    return path


def check_pretrained(path: str, state: dict, model_section: dict) -> None:
    """--adaptation from a checkpoint of this framework: its architecture must be this run's (the task and the
    data may differ: that is what fine-tuning is for). A plain state dict is checked by its keys only."""
    if isinstance(state.get("identity"), dict):
        check_checkpoint(path, RunIdentity(**state["identity"]), {"model": model_section}, ("model",),
                         purpose="fine-tune from")


def start_clean(plan: RunPlan) -> None:
    """Remove what an earlier run of this identity left (main rank only, before training starts)."""
    for folder in (plan.checkpoint_dir, plan.results_dir):
        shutil.rmtree(folder, ignore_errors=True)


def model_section(args) -> dict:
    """The architecture: the model, its revision and its own hyper-parameters (those added later, and the revision,
    only off their first value: added_later)."""
    return _as_recorded({"model": args.model, "revision": models.revision(args.model), **model_hparams(args)},
                        added_later(args.model))
