"""Journals and the run writer: matching a lane against its log, divergence, verify-only mode,
the closed log, and the fence that keeps a second writer out."""
from __future__ import annotations

import pytest

from magis_ray.actors.runtime.journal import Divergence, Journal, RunClosed, RunWriter, lanes_of
from magis_ray.events.codec import new_event
from magis_ray.events.schema import (LLMExchanged, MeetingUtterance, Message, RunFailed, RunFinished, RunResumed,
                                     RunStarted)
from magis_ray.store import ConcurrencyConflict
from magis_ray.store.memory import InMemoryStore

ASK = LLMExchanged(purpose="meeting_open", model="m", messages=[Message("user", "open the meeting")], answer='{"text": "hi"}')
SAID = MeetingUtterance(turn=1, speaker="Manager", text="hi")
STARTED = RunStarted(instance_id="calc__calc-1", repo="calc/calc", base_commit="0" * 40, problem_statement="mean is wrong")


def recorded_lane():
    store = InMemoryStore()
    writer = RunWriter(store, "r")
    journal = Journal("manager", writer)
    journal.emit(ASK)
    journal.emit(SAID)
    return store, lanes_of(store.read("r"))


def test_a_lane_is_matched_not_rewritten_and_the_answer_reused():
    store, lanes = recorded_lane()
    again = Journal("manager", RunWriter(store, "r"), lanes["manager"])
    probe = LLMExchanged(purpose="meeting_open", model="", messages=ASK.messages)
    assert again.recorded_exchange(probe).answer == ASK.answer
    assert again.emit(SAID) == lanes["manager"][1].event_id
    assert store.version("r") == 2 and again.pending == 0
    again.emit(MeetingUtterance(turn=2, speaker="Manager", text="bye"))  # past the log: written
    assert store.version("r") == 3


def test_another_request_or_event_than_the_log_holds_is_a_divergence():
    store, lanes = recorded_lane()
    other = LLMExchanged(purpose="meeting_open", model="", messages=[Message("user", "open it")])
    with pytest.raises(Divergence) as caught:
        Journal("manager", RunWriter(store, "r"), lanes["manager"]).recorded_exchange(other)
    assert caught.value.expected.version == 1 and caught.value.got == other
    journal = Journal("manager", None, lanes["manager"])
    journal.recorded_exchange(LLMExchanged(purpose="meeting_open", model="", messages=ASK.messages))
    with pytest.raises(Divergence):
        journal.emit(MeetingUtterance(turn=1, speaker="Manager", text="hello"))


def test_verifying_never_asks_for_an_answer_the_log_lacks():
    with pytest.raises(Divergence):
        Journal("qa:T1", None, []).recorded_exchange(ASK)
    assert Journal("qa:T1", RunWriter(InMemoryStore(), "r"), []).recorded_exchange(ASK) is None


def test_an_ended_log_takes_nothing_until_a_resume_reopens_it():
    store = InMemoryStore()
    writer = RunWriter(store, "r")
    writer.write([new_event(SAID, "manager"), new_event(RunFinished(outcome="no_patch"), "supervisor")])
    with pytest.raises(RunClosed):
        writer.write([new_event(SAID, "manager")])
    with pytest.raises(RunClosed):
        RunWriter(store, "r").write([new_event(SAID, "manager")])
    writer.write([new_event(RunResumed(kept_version=1), "resume"), new_event(SAID, "manager")])
    assert store.version("r") == 4


def test_a_log_ended_before_it_began_is_closed_unbegun():
    """A run stopped before its supervisor wrote RunStarted is no run: the ending is not written,
    and neither is the supervisor's late first event. Once begun, the ending is written."""
    store = InMemoryStore()
    interrupted = RunFailed(reason="interrupted by the user", error_type="Interrupted", resumable=True)
    writer = RunWriter(store, "r")
    assert writer.end([new_event(interrupted, "driver")]) is False
    with pytest.raises(RunClosed):
        writer.write([new_event(STARTED, "supervisor")])
    assert store.list_runs() == []
    begun = RunWriter(store, "s")
    begun.write([new_event(STARTED, "supervisor")])
    assert begun.end([new_event(interrupted, "driver")]) is True
    assert [type(r.event).__name__ for r in store.read("s")] == ["RunStarted", "RunFailed"]


def test_a_second_writer_fences_out_the_first():
    store = InMemoryStore()
    zombie, resumed = RunWriter(store, "r"), RunWriter(store, "r")
    zombie.write([new_event(SAID, "manager")])
    resumed.write([new_event(RunResumed(kept_version=1), "resume")])
    with pytest.raises(ConcurrencyConflict):
        zombie.write([new_event(SAID, "manager")])
    assert [type(r.event).__name__ for r in store.read("r")] == ["MeetingUtterance", "RunResumed"]


def test_a_prompt_cut_to_fit_the_context_matches_the_whole_one():
    from magis_ray.actors.model.fitting import fit_to_context

    whole = [Message("system", "You are a developer."), Message("user", "line\n" * 4000 + 'Answer as JSON: {"ranges": []}')]
    fitted = fit_to_context(whole, 200, 1024)
    assert fitted.cut_chars > 0
    sent = LLMExchanged(purpose="locate_lines", model="m", messages=fitted.messages, answer="{}", truncated_chars=fitted.cut_chars)
    store = InMemoryStore()
    Journal("developer:T1", RunWriter(store, "r")).emit(sent)
    again = Journal("developer:T1", None, store.read("r"))
    assert again.recorded_exchange(LLMExchanged(purpose="locate_lines", model="", messages=whole)) == sent
    other = [whole[0], Message("user", "line\n" * 3999 + 'Answer as JSON: {"ranges": []}')]
    with pytest.raises(Divergence):
        Journal("developer:T1", None, store.read("r")).recorded_exchange(LLMExchanged(purpose="locate_lines", model="", messages=other))
