"""What the ranks of a torchrun job tell each other outside the process group, through torchrun's store: a rank's
one-line error or interruption, the start-up agreement, and the wait for a file the main rank writes.

A rank that fails publishes its error, so that the others say "a peer rank stopped: <its error>" instead of
waiting for it in a collective or reporting a failed collective. One object per process holds the store and what
this rank has said and heard; a process that torchrun did not launch gets NoPeers, which has no one to tell.
"""
import contextlib
import datetime
import json
import os
import socket
import time
import uuid

import torch.distributed as dist

from utils.dist import DistEnv
from utils.errors import ConfigError

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_FAILURES = "tsf/failures"
_INFORMED = "tsf/informed"  # ranks that failed or have read another's failure
LINGER_SECONDS = 60.0  # at most this long a rank that failed at start-up waits for every peer to read its error
SHARED_WAIT_SECONDS = 10.0  # how long a rank looks for the main rank's token (a network file system's caches)
_TOKEN = ".tsf-shared-{}"


class Peers:
    """This rank's side of the messages between the ranks of one torchrun job (attempt)."""

    def __init__(self, rank: int, world: int, store: dist.Store | None = None):
        """store: torchrun's, connected on first use when None (tests pass one of their own)."""
        self.rank, self.world = rank, world
        self._store = store
        self.informed = False           # counted among the ranks that failed or read another's failure
        self.failed_at_startup = False  # publish() then waits until every peer has read the error

    @staticmethod
    def of_this_process():
        """Peers under torchrun, NoPeers otherwise: decided once, from the environment."""
        if all(v in os.environ for v in _TORCHRUN_VARS):
            return Peers(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return NoPeers()

    def store(self, timeout: datetime.timedelta) -> dist.Store:
        """torchrun's rendezvous store, connected once and namespaced by the restart count: torchrun keeps one store
        across restarts, and a restarted group would otherwise read the addresses its failed predecessor published
        and wait for peers that no longer exist."""
        if self._store is None:
            agent_hosts_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), self.world,
                                  is_master=not agent_hosts_store and self.rank == 0, timeout=timeout)
            self._store = dist.PrefixStore(f"attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        return self._store

    def startup(self, env: DistEnv, timeout_minutes: float, shared: dict | None = None) -> "Startup":
        return Startup(self, env, timeout_minutes, shared or {})

    def publish(self, message: str, interruption: bool = False) -> None:
        """Leave this rank's one-line error (or, interruption: why it was stopped) where every peer looks for it
        (best effort: the store may be gone). After a start-up failure, wait until every peer has read it: the
        store may live in this node's torchrun agent, which leaves with this rank. Peers blocked in a collective
        cannot read until this process is gone, so a failure during training does not wait."""
        if self.world < 2:
            return
        try:
            store = self.store(datetime.timedelta(seconds=10))
            store.set(f"tsf/{'interruption' if interruption else 'failure'}/{self.rank}", message)
            store.add(_FAILURES, 1)
            self._count_informed(store)
            deadline = time.monotonic() + LINGER_SECONDS
            while self.failed_at_startup and store.add(_INFORMED, 0) < self.world and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 - nothing more to do for a rank that is failing already
            pass

    def _count_informed(self, store) -> None:
        if not self.informed:
            store.add(_INFORMED, 1)
            self.informed = True

    def failure(self, interruptions: bool = True) -> str | None:
        """The first published error of another rank, else (interruptions) its interruption, if any (never blocks
        on a missing key)."""
        if self._store is None:
            return None
        try:
            if self._store.add(_FAILURES, 0) == 0:
                return None
            for kind in ("failure", "interruption") if interruptions else ("failure",):
                for rank in range(self.world):
                    key = f"tsf/{kind}/{rank}"
                    if rank != self.rank and self._store.check([key]):
                        message = self._store.get(key).decode()
                        self._count_informed(self._store)
                        return message
        except Exception:  # noqa: BLE001 - the store went away with the rank that hosted it
            return "it left before saying why, and took the rendezvous store with it"
        return None

    def wait_for_main(self, ready, what: str, timeout_minutes: float) -> None:
        """Block this rank until ready() (a file the main rank writes during start-up); the main rank's failure,
        published as any start-up failure is, ends the wait at once."""
        if self.world < 2:
            return
        self.store(datetime.timedelta(minutes=timeout_minutes))
        deadline = time.monotonic() + timeout_minutes * 60
        while not ready():
            self.stop_if_a_peer_failed()
            if time.monotonic() > deadline:
                raise ConfigError(f"waited --dist_timeout {timeout_minutes:g} min for {what}: every node must see "
                                  "the same file system")
            time.sleep(0.2)

    def stop_if_a_peer_failed(self) -> None:
        """Stop this rank's start-up with one line when another rank has published its error."""
        failure = self.failure()
        if failure:
            raise ConfigError(f"a peer rank stopped: {failure}")


class NoPeers:
    """A process on its own: no one to tell, no one to wait for."""
    world = 1

    def startup(self, env: DistEnv, timeout_minutes: float, shared: dict | None = None) -> "Startup":
        return Startup(self, env, timeout_minutes, shared or {})

    def publish(self, message: str, interruption: bool = False) -> None:
        pass

    def failure(self, interruptions: bool = True) -> None:
        return None

    def wait_for_main(self, ready, what: str, timeout_minutes: float) -> None:
        pass


class Startup:
    """The checks that can fail on bad input run inside `with peers.startup(env, timeout, shared) as startup:` on
    every rank.

    A rank whose checks fail publishes its one-line error (run.py's handler) and exits; at the end of the block
    the others see it and stop with "a peer rank stopped: <its error>" instead of waiting for it in a collective.

    Ranks that pass then agree on two things. What each decided from the files it read (`startup.decided`:
    name -> value, e.g. the data file's content fingerprint) must be equal on every rank: different data or
    checkpoints on different nodes are an error, not a silent divergence. And every folder of `shared` (flag ->
    folder) must be one folder on every node: the main rank writes a token file into each, and a rank that
    cannot read it back within SHARED_WAIT_SECONDS names its host (a checkpoint saved where another node cannot
    read it would otherwise be found missing only after training).
    """

    def __init__(self, peers, env: DistEnv, timeout_minutes: float, shared: dict):
        self.peers, self.env, self.timeout = peers, env, datetime.timedelta(minutes=timeout_minutes)
        self.shared = shared
        self.decided = {}

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is not None or not self.env.ddp or self.env.world_size == 1:
            self.peers.failed_at_startup = kind is not None
            return
        try:
            self._agree(self.peers.store(self.timeout))
        except ConfigError:
            self.peers.failed_at_startup = True
            raise

    def _agree(self, store) -> None:
        rank, world = self.env.rank, self.env.world_size
        tokens = _write_tokens(store, self.shared) if self.env.is_main else []
        store.set(f"tsf/decided/{rank}", json.dumps(self.decided))
        self._all_reach(store, "tsf/ready")
        unseen = "" if self.env.is_main else _unseen_tokens(store, self.shared, rank)
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
            self.peers.stop_if_a_peer_failed()
            if store.add(key, 0) == self.env.world_size:
                return
            if time.monotonic() > deadline:
                raise ConfigError("some ranks did not finish start-up within --dist_timeout")
            time.sleep(0.05)


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


def _unseen_tokens(store, shared: dict, rank: int) -> str:
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
    return (f"rank {rank} on host {socket.gethostname()} cannot see what rank 0 on host {token['host']} wrote "
            f"into {where}")
