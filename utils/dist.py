"""Distribution detected once from the torchrun environment, plus reduction helpers.

Every helper is a no-op in a single process, so the training code has one path for
1 process, N processes on one node and N nodes.
"""
import contextlib
import datetime
import json
import os
import socket
import statistics
import time
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from utils.errors import ConfigError

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str  # nccl on CUDA, gloo on CPU; unused single-process
    ddp: bool

    @property
    def is_main(self) -> bool:
        """Global rank 0: the only process that writes files and prints progress."""
        return self.rank == 0


def detect(ddp: bool, device: str = "auto") -> DistEnv:
    """Read rank/world from torchrun's variables; refuse a launch that does not match --ddp."""
    under_torchrun = all(v in os.environ for v in _TORCHRUN_VARS)
    if ddp and not under_torchrun:
        raise ConfigError("--ddp needs a torchrun launch (RANK, LOCAL_RANK, WORLD_SIZE are not set): "
                          "torchrun --nproc_per_node=N run.py --ddp ...")
    if not ddp and under_torchrun:
        raise ConfigError("launched by torchrun but --ddp is missing: add --ddp to the run.py arguments")
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda but no CUDA device is visible")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {local_rank} has no GPU: only {torch.cuda.device_count()} visible; "
                              "use --nproc_per_node <= number of GPUs")
        dev = torch.device("cuda", local_rank)
        backend = "nccl"
    elif device == "cpu":
        dev = torch.device("cpu")
        backend = "gloo"
    else:
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    return DistEnv(rank, local_rank, world_size, dev, backend, ddp)


def init(env: DistEnv, timeout_minutes: float = 30.0) -> None:
    """Join the process group; a bounded timeout turns a dead peer into an error, not a hang."""
    if not env.ddp or dist.is_initialized():
        return
    if env.device.type == "cuda":
        torch.cuda.set_device(env.device)
    timeout = datetime.timedelta(minutes=timeout_minutes)
    dist.init_process_group(backend=env.backend, store=_connect(env.world_size, timeout), rank=env.rank,
                            world_size=env.world_size, timeout=timeout,
                            device_id=env.device if env.device.type == "cuda" else None)


_STORE = {}  # the rendezvous store of this attempt, connected once


def _connect(world_size: int, timeout: datetime.timedelta) -> dist.Store:
    """torchrun's rendezvous store, namespaced by its restart count.

    torchrun keeps one store across restarts: without the namespace, a restarted group would read the
    addresses its failed predecessor published and wait for peers that no longer exist.
    """
    if "store" not in _STORE:
        agent_hosts_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                              is_master=not agent_hosts_store and os.environ["RANK"] == "0", timeout=timeout)
        _STORE["store"] = dist.PrefixStore(f"attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    return _STORE["store"]


# ---- start-up: every rank learns within seconds that another could not start ---------------------------
_FAILURES = "tsf/failures"
_INFORMED = "tsf/informed"  # ranks that failed or have read another's failure
_LINGER_SECONDS = 60.0
_HERE = {"informed": False, "startup_failed": False}  # this process: counted in _INFORMED; failed in start-up


class Startup:
    """The checks that can fail on bad input run inside `with Startup(env, timeout, shared) as startup:` on every
    rank.

    A rank whose checks fail publishes its one-line error (publish_failure, from run.py's handler) and exits;
    at the end of the block the others see it and stop with "a peer rank stopped: <its error>" instead of
    waiting for it in a collective. Before exiting it waits (at most a minute) until every peer has read the
    error: the store may live in its node's torchrun agent, which leaves with it.

    Ranks that pass then agree on two things. What each decided from the files it read (`startup.decided`:
    name -> value, e.g. the data file's content fingerprint) must be equal on every rank: different data or
    checkpoints on different nodes are an error, not a silent divergence. And every folder of `shared` (flag ->
    folder) must be one folder on every node: the main rank writes a token file into each, and a rank that
    cannot read it back within SHARED_WAIT_SECONDS names its host (a checkpoint saved where another node cannot
    read it would otherwise be found missing only after training).
    """

    def __init__(self, env: DistEnv, timeout_minutes: float, shared: dict | None = None):
        self.env, self.timeout = env, datetime.timedelta(minutes=timeout_minutes)
        self.shared = shared or {}
        self.decided = {}

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is not None:
            _HERE["startup_failed"] = True
        if kind is not None or not self.env.ddp or self.env.world_size == 1:
            return
        try:
            self._agree(_connect(self.env.world_size, self.timeout))
        except ConfigError:
            _HERE["startup_failed"] = True
            raise

    def _agree(self, store) -> None:
        rank, world = self.env.rank, self.env.world_size
        tokens = _write_tokens(store, self.shared) if self.env.is_main else []
        store.set(f"tsf/decided/{rank}", json.dumps(self.decided))
        self._all_reach(store, "tsf/ready")
        unseen = "" if self.env.is_main else _unseen_tokens(store, self.shared)
        store.set(f"tsf/unseen/{rank}", unseen)
        self._all_reach(store, "tsf/checked")
        for token in tokens:  # every rank has looked for them
            with contextlib.suppress(OSError):
                os.remove(token)
        unseen = [text for r in range(world) if (text := store.get(f"tsf/unseen/{r}").decode())]
        if unseen:
            raise ConfigError(f"{'; '.join(unseen)}: every node must see the same --checkpoints and --results_dir "
                              "(a shared file system, or an absolute path on one)")
        decided = [json.loads(store.get(f"tsf/decided/{r}")) for r in range(world)]
        for name, value in decided[0].items():
            odd = [r for r, d in enumerate(decided) if d.get(name) != value]
            if odd:
                raise ConfigError(f"ranks {odd} decided differently from rank 0 at start-up: {name} "
                                  f"{decided[odd[0]].get(name)!r} on rank {odd[0]}, {value!r} on rank 0: data "
                                  "files and --checkpoints must be the same on every node")

    def _all_reach(self, store, key: str) -> None:
        """Count this rank in `key`, then wait until every rank has (a peer's published failure ends the wait)."""
        store.add(key, 1)
        deadline = time.monotonic() + self.timeout.total_seconds()
        while True:
            failure = peer_failure()
            if failure:
                raise ConfigError(f"a peer rank stopped: {failure}")
            if store.add(key, 0) == self.env.world_size:
                return
            if time.monotonic() > deadline:
                raise ConfigError("some ranks did not finish start-up within --dist_timeout")
            time.sleep(0.05)


SHARED_WAIT_SECONDS = 10.0  # how long a rank looks for the main rank's token (a network file system's caches)
_TOKEN = ".tsf-shared-{}"


def _write_tokens(store, shared: dict) -> list:
    """The main rank's token file in each shared folder (its name and content a fresh random nonce)."""
    nonce, paths = uuid.uuid4().hex, []
    for flag, folder in shared.items():
        path = os.path.join(folder, _TOKEN.format(nonce))
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w") as f:
                f.write(nonce)
        except OSError as e:
            raise ConfigError(f"{flag} {folder}: cannot write there ({e.strerror or e})") from None
        paths.append(path)
    store.set("tsf/shared_token", json.dumps({"nonce": nonce, "host": socket.gethostname()}))
    return paths


def _unseen_tokens(store, shared: dict) -> str:
    """'rank r on host h cannot see what rank 0 on host h0 wrote into --flag folder (...)', or '' when this rank
    reads every token."""
    token = json.loads(store.get("tsf/shared_token"))
    nonce, missing = token["nonce"], dict(shared)
    deadline = time.monotonic() + SHARED_WAIT_SECONDS
    while missing and time.monotonic() < deadline:
        for flag, folder in list(missing.items()):
            with contextlib.suppress(OSError):
                with open(os.path.join(folder, _TOKEN.format(nonce))) as f:
                    if f.read() == nonce:
                        del missing[flag]
        if missing:
            time.sleep(0.2)
    if not missing:
        return ""
    where = ", ".join(f"{flag} {folder} ({os.path.abspath(folder)})" for flag, folder in missing.items())
    return (f"rank {os.environ['RANK']} on host {socket.gethostname()} cannot see what rank 0 on host {token['host']} "
            f"wrote into {where}")


def wait_for_main(ready, what: str, timeout_minutes: float) -> None:
    """Block a rank until ready() (a file the main rank writes during start-up); the main rank's failure,
    published as any start-up failure is, ends the wait at once."""
    if not _under_torchrun() or int(os.environ["WORLD_SIZE"]) < 2:
        return
    _connect(int(os.environ["WORLD_SIZE"]), datetime.timedelta(minutes=timeout_minutes))
    deadline = time.monotonic() + timeout_minutes * 60
    while not ready():
        failure = peer_failure()
        if failure:
            raise ConfigError(f"a peer rank stopped: {failure}")
        if time.monotonic() > deadline:
            raise ConfigError(f"waited --dist_timeout {timeout_minutes:g} min for {what}: every node must see the "
                              "same file system")
        time.sleep(0.2)


def _under_torchrun() -> bool:
    return all(v in os.environ for v in (*_TORCHRUN_VARS, "MASTER_ADDR", "MASTER_PORT"))


def publish_failure(message: str, interruption: bool = False) -> None:
    """Leave this rank's one-line error (or, interruption: why it was stopped) where every peer looks for it (best
    effort: the store may be gone).

    After a start-up failure, wait until every peer has read it. Peers blocked in a collective cannot read
    until this process is gone, so a failure during training does not wait.
    """
    if not _under_torchrun() or int(os.environ["WORLD_SIZE"]) < 2:
        return
    world = int(os.environ["WORLD_SIZE"])
    try:
        store = _connect(world, datetime.timedelta(seconds=10))
        store.set(f"tsf/{'interruption' if interruption else 'failure'}/{os.environ['RANK']}", message)
        store.add(_FAILURES, 1)
        _count_informed(store)
        deadline = time.monotonic() + _LINGER_SECONDS
        while _HERE["startup_failed"] and store.add(_INFORMED, 0) < world and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - nothing more to do for a rank that is failing already
        pass


def _count_informed(store) -> None:
    if not _HERE["informed"]:
        store.add(_INFORMED, 1)
        _HERE["informed"] = True


def peer_failure(interruptions: bool = True) -> str | None:
    """The first published error of another rank, else (interruptions) its interruption, if any (never blocks on
    a missing key)."""
    if "store" not in _STORE:
        return None
    store = _STORE["store"]
    try:
        if store.add(_FAILURES, 0) == 0:
            return None
        for kind in ("failure", "interruption") if interruptions else ("failure",):
            for rank in range(int(os.environ["WORLD_SIZE"])):
                key = f"tsf/{kind}/{rank}"
                if str(rank) != os.environ["RANK"] and store.check([key]):
                    failure = store.get(key).decode()
                    _count_informed(store)
                    return failure
    except Exception:  # noqa: BLE001 - the store went away with the rank that hosted it
        return "it left before saying why, and took the rendezvous store with it"
    return None


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over all ranks (every rank receives the result); no-op single-process."""
    return _all_reduce(tensor, dist.ReduceOp.SUM)


def all_reduce_min(tensor: torch.Tensor) -> torch.Tensor:
    return _all_reduce(tensor, dist.ReduceOp.MIN)


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    return _all_reduce(tensor, dist.ReduceOp.MAX)


def _all_reduce(tensor: torch.Tensor, op) -> torch.Tensor:
    if is_distributed():
        dist.all_reduce(tensor, op=op)
    return tensor


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Exact mean over all ranks from per-rank (sum, count), not a mean of per-rank means; total may hold
    several sums that share the count (one all_reduce for all)."""
    both = all_reduce_sum(torch.cat([total.double().reshape(-1), count.double().reshape(1)]))
    return (both[:-1] / both[-1]).reshape(total.shape)


def all_gather_object(obj) -> list:
    """Every rank's obj (picklable), on every rank; [obj] single-process."""
    if not is_distributed():
        return [obj]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_gather_floats(value: float, device: torch.device) -> list:
    """Every rank's value of a scalar, on every rank."""
    if not is_distributed():
        return [value]
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return [t.item() for t in gathered]


def slow_ranks(times: list, factor: float = 1.5) -> list:
    """Ranks whose time exceeds `factor` x the median of all ranks' times."""
    median = statistics.median(times)
    return [rank for rank, t in enumerate(times) if t > factor * median]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


_COLLECTIVE_FAILURES = ("gloo", "NCCL", "Timed out", "timed out", "Connection reset", "Connection closed")


def describe_failure(error: BaseException) -> str | None:
    """One line for a collective that failed because a peer died or stalled; None for other errors."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, dist.DistError) or any(s in message for s in _COLLECTIVE_FAILURES):
        return (f"a collective operation failed: another rank died, stalled past --dist_timeout, or is "
                f"unreachable ({message[:300]}); check the other ranks' logs")
    return None
