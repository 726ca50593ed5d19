"""The store's contract, port by port (store/base.py): the log, search, the summary memory and
leases, each run on every backend that implements it (in-memory, and SQLite on a real file), and
the summary memory also through the store actor's class (run in this process, over its own
connection to the file the log is appended to)."""
from __future__ import annotations

import inspect
import threading

import pytest

from magis_ray.events.codec import new_event
from magis_ray.events.schema import LLMExchanged, MeetingUtterance, Message, Recorded, RunStarted
from magis_ray.store import (
    ConcurrencyConflict, EventLog, EventSearch, EventStore, Leases, MemoryEntry, SummaryMemory, UnknownRun,
)
from magis_ray.store.memory import InMemoryStore
from magis_ray.store.sqlite import SQLiteStore

BACKENDS = ["memory", "sqlite"]


def open_backend(kind: str, tmp_path) -> EventStore:
    return InMemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / ".magis", create=True)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    """A whole backend; each section below uses only its port's methods (and the log's append,
    to move the global position on)."""
    s = open_backend(request.param, tmp_path)
    yield s
    s.close()


@pytest.fixture(params=[*BACKENDS, "store actor"])
def memory_and_log(request, tmp_path):
    """A summary memory and the log its positions are taken from."""
    if request.param != "store actor":
        s = open_backend(request.param, tmp_path)
        yield s, s
        s.close()
        return
    from magis_ray.actors.runtime.services import StoreService

    log = SQLiteStore.open(tmp_path / ".magis", create=True)
    service = StoreService(str(tmp_path / ".magis"))
    yield service, log
    log.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_every_backend_implements_every_port(kind, tmp_path):
    with open_backend(kind, tmp_path) as backend:
        assert all(isinstance(backend, port) for port in (EventLog, EventSearch, SummaryMemory, Leases, EventStore))


def test_the_memorys_proxies_forward_every_method_with_the_ports_signature():
    """The store actor, a role's view of it and replay's view forward the port's methods, made
    from the port itself (Ray checks a call's arguments against these signatures); replay's view
    writes nothing, its one method of its own."""
    from magis_ray.actors.runtime.forwarding import port_methods
    from magis_ray.actors.runtime.replay import MemoryAsOf
    from magis_ray.actors.runtime.services import StoreMemory, StoreService

    assert port_methods(SummaryMemory) == ["get_summary", "latest_summary", "put_summary"]
    for proxy in (StoreService, StoreMemory, MemoryAsOf):
        forwarded = [name for name in port_methods(SummaryMemory) if name not in vars(proxy)]
        assert forwarded == (["get_summary", "latest_summary"] if proxy is MemoryAsOf else port_methods(SummaryMemory))
        for name in forwarded:
            assert inspect.signature(getattr(proxy, name)) == inspect.signature(getattr(SummaryMemory, name)), (proxy, name)


# --- the log -------------------------------------------------------------------------------


def started(instance: str = "django__django-11099"):
    return new_event(RunStarted(instance_id=instance, repo="django/django", base_commit="abc123", problem_statement="fix it"), "cli")


def talk(n: int, speaker: str = "manager"):
    return [new_event(MeetingUtterance(turn=i, speaker=speaker, text=f"turn {i}"), speaker) for i in range(n)]


def exchange():
    messages = [Message("system", "You are a developer."), Message("user", "def f():\n    return 1\n" * 50)]
    return new_event(LLMExchanged(purpose="locate_lines", model="gpt-4o", messages=messages, answer="[1, 3]"), "developer:T1")


def texts(recorded: list[Recorded]) -> list[str]:
    return [r.event.text for r in recorded]


def test_append_returns_the_recorded_batch_and_reads_it_back_whole(store):
    batch = [started(), *talk(3), exchange()]
    recorded = store.append("r1", 0, batch)
    assert [r.version for r in recorded] == [1, 2, 3, 4, 5]
    assert [r.event for r in recorded] == [e.event for e in batch]
    assert [(r.event_id, r.actor, r.time) for r in recorded] == [(e.event_id, e.actor, e.time) for e in batch]
    assert all(r.run_id == "r1" for r in recorded)
    assert store.read("r1") == recorded
    assert store.version("r1") == 5


def test_versions_are_gap_free_from_one_across_batches(store):
    store.append("r1", 0, [started()])
    store.append("r1", 1, talk(2))
    store.append("r1", 3, talk(4))
    assert [r.version for r in store.read("r1")] == list(range(1, 8))


def test_stale_expected_version_conflicts_and_writes_nothing(store):
    store.append("r1", 0, [started(), *talk(2)])
    before = store.read_all()
    for stale in (0, 2, 4):
        with pytest.raises(ConcurrencyConflict):
            store.append("r1", stale, talk(3, speaker="late"))
    with pytest.raises(ConcurrencyConflict):
        store.append("new-run", 1, talk(2))
    assert store.read_all() == before
    assert store.version("r1") == 3 and store.version("new-run") == 0
    assert [r.run_id for r in store.list_runs()] == ["r1"]
    # The positions the failed batches did not take are still free: the next batch follows on.
    assert [r.position for r in store.append("r1", 3, talk(1))] == [before[-1].position + 1]


def test_a_failing_batch_writes_nothing(store):
    store.append("r1", 0, [started()])

    class NotAnEvent:  # cannot be encoded: the whole batch must fail, including the good events before it
        pass

    bad = [*talk(2), new_event(NotAnEvent(), "x")]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.append("r1", 1, bad)
    assert store.version("r1") == 1 and len(store.read_all()) == 1
    assert [r.position for r in store.append("r1", 1, talk(2))] == [2, 3]


def test_empty_batch_writes_nothing(store):
    assert store.append("r1", 0, []) == []
    assert store.list_runs() == [] and store.read_all() == []


def test_global_positions_strictly_increase_across_runs(store):
    store.append("a", 0, [started("a")])
    store.append("b", 0, [started("b"), *talk(2)])
    store.append("a", 1, talk(3))
    store.append("b", 3, talk(1))
    everything = store.read_all()
    assert [r.position for r in everything] == list(range(1, 9))
    assert [(r.run_id, r.version) for r in everything] == [
        ("a", 1), ("b", 1), ("b", 2), ("b", 3), ("a", 2), ("a", 3), ("a", 4), ("b", 4),
    ]
    for run_id in ("a", "b"):
        positions = [r.position for r in store.read(run_id)]
        assert positions == sorted(positions)


def test_read_after_version(store):
    store.append("r1", 0, [started(), *talk(4)])
    assert [r.version for r in store.read("r1", after_version=2)] == [3, 4, 5]
    assert texts(store.read("r1", after_version=4)) == ["turn 3"]
    assert store.read("r1", after_version=5) == []


def test_read_all_after_a_position_and_with_a_limit(store):
    store.append("a", 0, [started("a"), *talk(3)])
    store.append("b", 0, [started("b"), *talk(3)])
    assert [r.position for r in store.read_all(after_position=5)] == [6, 7, 8]
    assert [r.position for r in store.read_all(after_position=2, limit=3)] == [3, 4, 5]
    assert [r.position for r in store.read_all(limit=2)] == [1, 2]
    assert store.read_all(after_position=8) == []
    assert store.read_all(limit=0) == []


def test_list_runs(store):
    a = store.append("a", 0, [started("a"), *talk(1)])
    b = store.append("b", 0, [started("b")])
    a += store.append("a", 2, talk(2))
    runs = {r.run_id: r for r in store.list_runs()}
    assert [r.run_id for r in store.list_runs()] == ["a", "b"]  # oldest first
    assert (runs["a"].version, runs["a"].first_time, runs["a"].last_time) == (4, a[0].time, a[-1].time)
    assert (runs["b"].version, runs["b"].first_time, runs["b"].last_time) == (1, b[0].time, b[0].time)


def test_unknown_run(store):
    with pytest.raises(UnknownRun):
        store.read("nope")
    store.append("r1", 0, [started()])
    with pytest.raises(UnknownRun):
        store.read("r2")
    assert store.version("nope") == 0


def test_returned_events_cannot_change_the_log(store):
    store.append("r1", 0, [exchange()])
    store.read("r1")[0].event.messages.append(Message("user", "sneaky"))
    assert len(store.read("r1")[0].event.messages) == 2


def test_threads_appending_with_retry_lose_nothing(store):
    def writer(name: str) -> None:
        for i in range(20):
            while True:
                try:
                    store.append("shared", store.version("shared"), talk(3, speaker=f"{name}-{i}"))
                    break
                except ConcurrencyConflict:
                    pass

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = store.read("shared")
    assert [r.version for r in events] == list(range(1, 241))
    speakers = [r.event.speaker for r in events]
    assert all(len(set(speakers[i : i + 3])) == 1 for i in range(0, 240, 3))  # every batch whole, in one piece
    assert len(set(speakers)) == 80


# --- the summary memory ------------------------------------------------------------------


def test_summary_put_and_get(memory_and_log):
    memory, log = memory_and_log
    assert memory.get_summary("repo", "a.py", "blob1") is None
    log.append("r1", 0, talk(2))
    memory.put_summary("repo", "a.py", "blob1", "parses the config")
    assert memory.get_summary("repo", "a.py", "blob1") == MemoryEntry("repo", "a.py", "blob1", "parses the config", 2)
    assert memory.get_summary("repo", "a.py", "blob2") is None
    assert memory.get_summary("other", "a.py", "blob1") is None


def test_summary_position_is_the_log_position_at_write_time(memory_and_log):
    memory, log = memory_and_log
    memory.put_summary("repo", "a.py", "v0", "before any event")
    log.append("r1", 0, talk(3))
    memory.put_summary("repo", "a.py", "v1", "after three events")
    assert memory.get_summary("repo", "a.py", "v0").position == 0
    assert memory.get_summary("repo", "a.py", "v1").position == 3


def test_latest_summary_and_before_position(memory_and_log):
    memory, log = memory_and_log
    assert memory.latest_summary("repo", "a.py") is None
    log.append("r1", 0, talk(1))
    memory.put_summary("repo", "a.py", "v1", "first")  # position 1
    log.append("r1", 1, talk(2))
    memory.put_summary("repo", "a.py", "v2", "second")  # position 3
    memory.put_summary("repo", "b.py", "v9", "another file")
    assert memory.latest_summary("repo", "a.py").summary == "second"
    assert memory.latest_summary("repo", "a.py", before_position=3).summary == "first"
    assert memory.latest_summary("repo", "a.py", before_position=1) is None
    assert memory.get_summary("repo", "a.py", "v2", before_position=3) is None
    assert memory.get_summary("repo", "a.py", "v2", before_position=4).summary == "second"
    assert memory.latest_summary("repo", "c.py") is None


def test_latest_summary_prefers_the_later_write_at_the_same_position(memory_and_log):
    memory, log = memory_and_log
    log.append("r1", 0, talk(1))
    memory.put_summary("repo", "a.py", "v1", "one")
    memory.put_summary("repo", "a.py", "v2", "two")
    assert memory.latest_summary("repo", "a.py").blob_id == "v2"
    memory.put_summary("repo", "a.py", "v1", "one again")
    assert memory.latest_summary("repo", "a.py").summary == "one again"


def test_summary_overwrite_replaces_text_and_position(memory_and_log):
    memory, log = memory_and_log
    memory.put_summary("repo", "a.py", "v1", "old")
    log.append("r1", 0, talk(2))
    memory.put_summary("repo", "a.py", "v1", "new")
    assert memory.get_summary("repo", "a.py", "v1") == MemoryEntry("repo", "a.py", "v1", "new", 2)
    assert memory.latest_summary("repo", "a.py", before_position=2) is None  # the old entry is gone


def test_summaries_are_kept_per_model(memory_and_log):
    memory, log = memory_and_log
    log.append("r1", 0, talk(1))
    memory.put_summary("repo", "a.py", "v1", "by big", model="big")
    memory.put_summary("repo", "a.py", "v1", "by small", "small")
    assert memory.get_summary("repo", "a.py", "v1", model="big").summary == "by big"
    assert memory.get_summary("repo", "a.py", "v1", None, "small").summary == "by small"
    assert memory.get_summary("repo", "a.py", "v1").summary == "by small"  # by any model: the later write
    assert memory.get_summary("repo", "a.py", "v1", model="other") is None
    assert memory.latest_summary("repo", "a.py", model="big") == MemoryEntry("repo", "a.py", "v1", "by big", 1, "big")


# --- leases ------------------------------------------------------------------------------


def test_a_live_lease_is_refused_to_another_owner_and_an_expired_one_is_taken_over(store):
    mine = store.take_lease("r1", "a", "host-a", 11, ttl_s=10, now=100.0)
    assert (mine.owner, mine.epoch, mine.expires) == ("a", 1, 110.0)
    theirs = store.take_lease("r1", "b", "host-b", 22, ttl_s=10, now=105.0)
    assert theirs == mine  # still a's: b learns who holds it
    assert store.renew_leases("a", ttl_s=10, now=108.0) == ["r1"]
    assert store.take_lease("r1", "b", "host-b", 22, ttl_s=10, now=117.0).owner == "a"  # renewed until 118
    taken = store.take_lease("r1", "b", "host-b", 22, ttl_s=10, now=119.0)
    assert (taken.owner, taken.host, taken.pid, taken.epoch) == ("b", "host-b", 22, 2)
    assert store.renew_leases("a", ttl_s=10, now=120.0) == []  # a lost it


def test_a_released_lease_is_free_and_its_epoch_keeps_growing(store):
    store.take_lease("r1", "a", "h", 1, ttl_s=10, now=100.0)
    store.release_lease("r1", "b")  # not b's to release
    assert store.take_lease("r1", "b", "h", 2, ttl_s=10, now=101.0).owner == "a"
    store.release_lease("r1", "a")
    assert store.take_lease("r1", "b", "h", 2, ttl_s=10, now=101.0).epoch == 2
    assert [lease.key for lease in store.leases("r")] == ["r1"] and store.leases("x") == []


def test_an_append_with_a_lost_lease_is_fenced_out_and_writes_nothing(store):
    from magis_ray.store import Fenced

    first = store.take_lease("r1", "a", "h", 1, ttl_s=10, now=100.0)
    store.append("r1", 0, talk(1), fence=first.epoch)
    second = store.take_lease("r1", "b", "other-host", 2, ttl_s=10, now=200.0)
    with pytest.raises(Fenced, match="other-host, pid 2"):
        store.append("r1", 1, talk(1), fence=first.epoch)
    store.append("r1", 1, talk(1), fence=second.epoch)
    assert [r.version for r in store.read("r1")] == [1, 2]


def test_a_lease_says_who_holds_it_and_a_dead_holders_lease_is_taken_over_while_live(store):
    """`replacing` takes over a live lease whose holder the caller knows to be dead, but only from
    that holder: a lease another driver took meanwhile stays its own."""
    dead = store.take_lease("r1", "a", "h", 11, ttl_s=30, now=100.0, started=555, pid_space="boot/pid:[1]")
    assert (dead.started, dead.pid_space) == (555, "boot/pid:[1]") and store.leases("r1") == [dead]
    assert store.take_lease("r1", "c", "h", 33, ttl_s=30, now=101.0, replacing="b").owner == "a"  # not b's
    taken = store.take_lease("r1", "b", "h", 22, ttl_s=30, now=101.0, started=777, pid_space="boot/pid:[1]", replacing="a")
    assert (taken.owner, taken.epoch, taken.started, taken.expires) == ("b", 2, 777, 131.0)
    assert store.leases("r1") == [taken]
    assert store.take_lease("r1", "c", "h", 33, ttl_s=30, now=102.0, replacing="a").owner == "b"  # too late: b holds it
    assert store.renew_leases("a", ttl_s=30, now=103.0) == []  # the dead holder, were it to wake, learns it lost it


# --- full-text search across every run's events ------------------------------------------------


def review(task: str, approved: bool, comment: str):
    from magis_ray.events.schema import ReviewIssued

    return new_event(ReviewIssued(task_id=task, attempt=1, approved=approved, comment=comment), f"qa:{task}")


def test_search_finds_every_runs_events_by_their_words_newest_first(store):
    store.append("r1", 0, [started(), review("T1", False, "The mean divides by n - 1.")])
    store.append("r2", 0, [started("astropy__astropy-1"), review("T1", True, "Correct mean now.")])
    store.append("r1", 2, [review("T2", False, "Still wrong: the MEAN of [1, 2] is 1.5")])
    found = store.search("mean")
    assert [(r.run_id, r.version) for r in found] == [("r1", 3), ("r2", 2), ("r1", 2)]
    assert [(r.run_id, r.version) for r in store.search("rejected")] == [("r1", 3), ("r1", 2)]  # the verdict's word
    assert [(r.run_id, r.version) for r in store.search("mean rejected")] == [("r1", 3), ("r1", 2)]  # every word
    assert [r.run_id for r in store.search("astropy")] == ["r2"]  # the RunStarted's instance id
    assert store.search("ReviewIssued approved")[0].event.comment == "Correct mean now."  # the type tag is a word


def test_search_phrases_prefixes_types_and_paging(store):
    store.append("r1", 0, [started(), *talk(3), exchange(), review("T1", False, "return 1 is wrong")])
    assert [r.version for r in store.search('"turn 2"')] == [4]
    assert [r.version for r in store.search('"2 turn"')] == []
    assert [r.version for r in store.search("tur*")] == [4, 3, 2]
    assert [r.version for r in store.search("return")] == [6, 5]  # the review's comment, the exchange's prompt
    assert [r.version for r in store.search("return", types=["LLMExchanged"])] == [5]
    assert [r.version for r in store.search("locate_lines")] == [5]  # a name is the phrase of its words
    assert [r.version for r in store.search("TURN", limit=2)] == [4, 3]
    assert [r.version for r in store.search("turn", before_position=3)] == [2]
    assert [r.version for r in store.search("dÉveloper")] == [5]  # case and accents fold, as FTS5 folds them


def test_search_takes_any_text_and_finds_what_was_appended_since(store):
    store.append("r1", 0, [started()])
    for nonsense in ('"', "(", "AND OR NOT", "*", "a:b", "-x", "NEAR(", "''", "   ", ""):
        assert store.search(nonsense) == []  # never a syntax error
    assert store.search('fix "it') [0].version == 1  # an unclosed quote ends at the end
    assert store.search("turn") == []
    store.append("r1", 1, talk(2))
    assert [r.version for r in store.search("turn")] == [3, 2]
