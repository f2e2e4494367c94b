"""The ranks' messages outside the process group (utils/peers.py), with fake ranks sharing one in-memory store:
who failed and why, interruptions, and the start-up agreement on decisions and shared folders."""
import threading

import pytest
import torch
import torch.distributed as dist

from utils import peers as peers_module
from utils.dist import DistEnv
from utils.errors import ConfigError
from utils.peers import NoPeers, Peers


def _env(rank, world=2):
    return DistEnv(rank, rank, world, torch.device("cpu"), "gloo", True)


def test_a_published_error_is_what_a_peer_reports_and_an_interruption_comes_after_errors():
    store = dist.HashStore()
    rank0, rank1, rank2 = (Peers(r, 3, store) for r in range(3))
    assert rank0.failure() is None
    rank2.publish("rank 2 was interrupted (SIGINT)", interruption=True)
    assert rank0.failure() == "rank 2 was interrupted (SIGINT)"
    assert rank0.failure(interruptions=False) is None, "a rank interrupted itself reports its own interruption"
    rank1.publish("rank 1: data file not found: x.csv")
    assert rank0.failure() == "rank 1: data file not found: x.csv", "an error is the news before an interruption"
    assert rank1.failure() == "rank 2 was interrupted (SIGINT)", "a rank never reads its own message"


def test_a_process_on_its_own_has_no_one_to_tell():
    alone = NoPeers()
    alone.publish("anything")
    assert alone.failure() is None
    with alone.startup(_env(0, 1), 1.0) as startup:
        startup.decided = {"data file": "x"}


def _start_up(peers, env, decided, shared):
    """Each rank's start-up block on a thread of its own: what it raised (None: it passed)."""
    outcome = {}

    def run():
        try:
            with peers.startup(env, 0.2, shared) as startup:
                startup.decided = decided
            outcome["error"] = None
        except ConfigError as e:
            outcome["error"] = str(e)
    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _both(decided, shared_of_rank, monkeypatch):
    monkeypatch.setattr(peers_module, "SHARED_WAIT_SECONDS", 0.3)
    store = dist.HashStore()
    runs = [_start_up(Peers(r, 2, store), _env(r), decided[r], shared_of_rank[r]) for r in (0, 1)]
    for thread, _ in runs:
        thread.join(10)
    return [outcome["error"] for _, outcome in runs]


def test_ranks_that_decided_alike_and_share_their_folders_pass(tmp_path, monkeypatch):
    decided = {"data file": "d.csv 10-ab"}
    assert _both([decided, decided], [{"--checkpoints": str(tmp_path)}] * 2, monkeypatch) == [None, None]
    assert not list(tmp_path.iterdir()), "the main rank removes its token once every rank looked"


def test_a_rank_with_other_data_stops_every_rank_naming_what_differs(tmp_path, monkeypatch):
    errors = _both([{"data file": "d.csv 10-ab"}, {"data file": "d.csv 10-cd"}], [{}, {}], monkeypatch)
    assert all(e and "decided differently from rank 0 at start-up: data file 'd.csv 10-cd' on rank 1, "
               "'d.csv 10-ab' on rank 0" in e for e in errors), errors


def test_a_rank_that_cannot_see_the_main_ranks_folder_names_its_host_and_the_folder(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    errors = _both([{}, {}], [{"--checkpoints": str(tmp_path / "a")}, {"--checkpoints": str(tmp_path / "b")}],
                   monkeypatch)
    assert all(e and "rank 1 on host" in e and f"wrote into --checkpoints {tmp_path / 'b'}" in e for e in errors), \
        errors


def test_a_rank_that_failed_at_start_up_stops_the_other_with_its_error(monkeypatch):
    store = dist.HashStore()
    waiting = Peers(0, 2, store)
    thread, outcome = _start_up(waiting, _env(0), {}, {})
    failing = Peers(1, 2, store)
    with pytest.raises(ValueError):
        with failing.startup(_env(1), 0.2):
            raise ValueError("bad input")
    assert failing.failed_at_startup
    monkeypatch.setattr(peers_module, "LINGER_SECONDS", 5.0)
    failing.publish("rank 1: bad input")
    thread.join(10)
    assert outcome["error"] == "a peer rank stopped: rank 1: bad input"
