"""The window explains requests: why each waiting one was not admitted (in words, refined by the
state's priorities), its priority, prefix-cache hits and preemptions, live and in replay; and
per-request controls (Set priority…, the inject dialog's priority). Every expected text is
worked out from the engine's states, records and requests, not written down."""
from __future__ import annotations

import pytest

from engine.sched.preemption import preemption_info
from tests.support.fakes import FakeControl, FakeSource, show, shown_window
from recordings.file.open_reader import open_reader
from ui import MainWindow
from engine.kv.prefix_explain import describe_detail as describe_prefix
from ui import request_menu
from ui.inspector import explain as request_explain
from ui.dialogs.inject import InjectDialog
from ui.views.request_table import NOT_ADMITTED_TEXT, PAUSED_TEXT, PRIORITY_COLUMN, REASON_COLUMN
from engine.vocab import BlockEventKind, NotAdmittedReason

# (prompt tokens, max_tokens, arrival step, priority) through 2 slots: a priority-0 request
# arriving at step 4 preempts a running priority-5 one; priorities 7 and 9 wait behind the
# blocked priority-5 ones. Prompts share 40 tokens, so prefix caching hits.
WORKLOAD = ((100, 30, 0, 5), (120, 30, 0, 5), (80, 20, 1, 7), (90, 20, 2, 5), (60, 10, 4, 0),
            (70, 10, 6, 9))


def priority_source(num_steps: int = 30, **kwargs) -> FakeSource:
    return FakeSource(num_steps, max_num_seqs=2, policy="priority", workload=WORKLOAD,
                      enable_prefix_caching=True, shared_prefix=40, **kwargs)


class NoMenu:
    """Stands in for a context menu: opening it does nothing (a real one would block)."""

    def exec(self, *args) -> None:
        pass


def priorities(state) -> dict[str, int]:
    return dict(zip(state.request_ids, state.columns["priority"].tolist()))


def expected_reason(source, step: int, rid: str) -> str:
    record, state = source.history[step], source.state_at(step)
    return record.not_admitted_reason(rid, priorities(state).get)


def test_waiting_table_says_every_reason_in_words_with_priorities(qtbot):
    source = priority_source()
    w = shown_window(qtbot, source)
    seen = set()
    for k in range(3, 20):
        show(w, k)
        model, state = w.queues.models["waiting"], w.state
        for i in range(model.rowCount()):
            rid = model.request_id(i)
            reason = expected_reason(source, k, rid)
            if rid in source.history[k].preempted_ids:
                continue                                  # "preempted in this step"
            seen.add(reason)
            assert model.data(model.index(i, REASON_COLUMN)) == NOT_ADMITTED_TEXT[reason], (k, rid)
            assert model.data(model.index(i, PRIORITY_COLUMN)) == str(priorities(state)[rid])
    assert NotAdmittedReason.LOWER_PRIORITY in seen and NotAdmittedReason.BEHIND in seen and len(seen) >= 3
    view = w.queues.views["waiting"]
    assert not view.isColumnHidden(PRIORITY_COLUMN)       # priority policy: the column shows

    fcfs = shown_window(qtbot, FakeSource(10))
    assert fcfs.queues.views["waiting"].isColumnHidden(PRIORITY_COLUMN)


def test_inspector_names_the_blocked_request_and_both_priorities(qtbot):
    source = priority_source()
    w = shown_window(qtbot, source)
    k = 8
    w.show_step(k)
    record, prio = source.history[k], priorities(source.state_at(k))
    first, why = record.not_admitted[0]
    checked = 0
    for rid in w.queues.models["waiting"].state.request_ids:
        reason = expected_reason(source, k, rid)
        if rid == first or source.state_at(k).view(rid).status not in ("WAITING", "PREEMPTED"):
            continue
        w.select_request(rid)
        text = w.inspector.values["reason"].text()
        if reason == NotAdmittedReason.LOWER_PRIORITY:
            assert text == (f"lower priority ({prio[rid]}) than {first} ({prio[first]}), which is "
                            f"blocked: {NOT_ADMITTED_TEXT[why]}")
        else:
            assert text == f"behind older request {first}, which is blocked: {NOT_ADMITTED_TEXT[why]}"
        checked += 1
    assert checked >= 2
    w.select_request(first)
    assert w.inspector.values["reason"].text() == NOT_ADMITTED_TEXT[why]


def test_paused_and_static_batch_reasons(qtbot):
    source = FakeSource(6)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    rid = source.state_at(5).running[-1].request_id
    control.pause_request(rid)
    w.refresh()
    model = w.queues.models["paused"]
    assert model.data(model.index(model.row_of(rid), REASON_COLUMN)) == PAUSED_TEXT
    w.select_request(rid)
    kept = source.engine.state().view(rid).num_computed_tokens
    assert kept > 0 and w.inspector.values["reason"].text() == (
        f"{PAUSED_TEXT} (keeps its KV, {kept} tokens, but no batch slot)")

    static = FakeSource(12, policy="static")
    w2 = shown_window(qtbot, static)
    found = 0
    for k in range(12):
        w2.show_step(k)
        model = w2.queues.models["waiting"]
        for i in range(model.rowCount()):
            if expected_reason(static, k, model.request_id(i)) == NotAdmittedReason.STATIC_BATCH:
                assert model.data(model.index(i, REASON_COLUMN)) == "static batch still running"
                found += 1
    assert found


def forensics_of(w: MainWindow, rid: str, step: int) -> dict[str, str]:
    w.show_step(step)
    w.select_request(rid)
    return {name: label.text() for name, label in w.inspector.forensics.values.items()}


def expected_forensics(source: FakeSource, rid: str, step: int):
    """(preemption lines, wasted line, [(admission step, blocks hit)]) worked out from the
    records up to ``step``: a preempted request comes back at its next admission, computing
    again what it dropped less the blocks that admission hit in the prefix cache."""
    bs, admissions, preempted = source.config.block_size, [], []
    for r in source.history[:step + 1]:
        for e in r.events:
            if e.request_id == rid and e.kind == "preempted":
                preempted.append((r.step, preemption_info(e.detail)))
            if e.request_id == rid and e.kind == "scheduled":
                admissions.append((r.step, sum(len(b.block_ids) for b in r.block_events
                                               if b.kind == BlockEventKind.HIT and b.request_id == rid)))
    lines, dropped, again = [], 0, 0
    for at, info in preempted:
        line = f"step {at}: {info.describe()}"
        back = next(((s, n) for s, n in admissions if s > at), None)
        dropped += info.num_tokens
        if back is not None:
            line += f"; back at step {back[0]}" + (f", {back[1] * bs} from the prefix cache" if back[1] else "")
            again += max(info.num_tokens - back[1] * bs, 0)
        lines.append(line)
    n = len(preempted)
    wasted = f"wasted: {dropped} KV tokens dropped, {again} computed again ({n} preemption{'s' * (n != 1)})"
    return lines, wasted, admissions


def test_inspector_shows_preemptions_wasted_work_and_prefix_hits(qtbot):
    source = priority_source()
    w = shown_window(qtbot, source)
    victim = next(rid for r in source.history for rid in r.preempted_ids)
    k = source.latest_step()
    lines, wasted, admissions = expected_forensics(source, victim, k)
    assert lines and len(admissions) >= 2 and "from the prefix cache" in lines[0]
    shown = forensics_of(w, victim, k)
    assert shown["preemptions"].split("\n") == lines + [wasted]
    assert "for req-" in lines[0] and "higher priority" in lines[0]
    bs = source.config.block_size
    req = source.engine.scheduler.requests[victim]
    first, blocks = admissions[0]
    assert req.num_cached_tokens == blocks * bs > 0          # the engine's own count
    head, *why = shown["prefix cache"].split("\n")
    assert head == f"{req.num_cached_tokens} of {req.num_prompt_tokens} prompt tokens hit ({blocks} blocks)"
    # then the engine's explainer line of each admission up to step k (engine.kv.prefix_explain),
    # and of each lookup that found something new while it waited ("still waiting (...) with ...")
    assert why == [describe_prefix(e.detail) for e in source.request_timeline(victim)
                   if e.kind in ("prefix_cache", "prefix_cache_waiting") and e.step <= k] and why
    assert sum(line.startswith("still waiting") for line in why) == sum(
        e.kind == "prefix_cache_waiting" and e.step <= k for e in source.request_timeline(victim))
    assert shown["priority"].startswith(str(req.priority))
    # before the preemption: none yet; before its admission: not admitted
    assert forensics_of(w, victim, first)["preemptions"] == "none"
    never = [v.request_id for v in source.state_at(k).waiting
             if not expected_forensics(source, v.request_id, k)[2]]
    assert never and all(forensics_of(w, rid, k)["prefix cache"] == "not admitted yet" for rid in never)


def test_forensics_rows_follow_the_run_config(qtbot):
    w = shown_window(qtbot, FakeSource(10))
    w.select_request("req-0")
    f = w.inspector.forensics
    assert [f.is_shown(row) for row in ("priority", "prefix cache", "preemptions")] == [
        False, False, True]                                   # fcfs, no prefix caching
    assert f.values["preemptions"].text() == "none"
    w.set_source(priority_source(4))
    w.select_request("req-0")
    assert f.is_shown("priority") and f.is_shown("prefix cache")


def test_prefix_explainer_hook_lists_registered_events(qtbot, monkeypatch):
    source = priority_source()
    seen = []

    def describe(detail):
        seen.append(detail)
        return f"match stopped: {detail}"
    monkeypatch.setitem(request_explain.PREFIX_EXPLAINERS, "scheduled", describe)
    w = shown_window(qtbot, source)
    text = forensics_of(w, "req-1", source.latest_step())["prefix cache"]
    events = [e for e in source.request_timeline("req-1")
              if e.kind in ("scheduled", "prefix_cache", "prefix_cache_waiting")]
    want = [f"match stopped: {e.detail}" if e.kind == "scheduled" else describe_prefix(e.detail)
            for e in events]
    assert text.split("\n")[1:] == want and len(seen) == sum(e.kind == "scheduled" for e in events)


def test_replay_explains_the_same_as_live(qtbot, tmp_path):
    path = tmp_path / "prio.sqlite"
    live = priority_source(record_to=path)
    live.close()
    w_live, w_replay = shown_window(qtbot, live), shown_window(qtbot, open_reader(path))
    victim = next(rid for r in live.history for rid in r.preempted_ids)
    for k in (3, 4, 10, live.latest_step()):
        for rid in (victim, "req-2", "req-5"):
            assert forensics_of(w_live, rid, k) == forensics_of(w_replay, rid, k), (k, rid)
            assert (w_live.inspector.values["reason"].text()
                    == w_replay.inspector.values["reason"].text()), (k, rid)


def test_set_priority_from_the_context_menu(qtbot, monkeypatch):
    source = priority_source(8)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    state = source.state_at(source.latest_step())
    rid = state.waiting[-1].request_id
    old = priorities(state)[rid]
    asked = []
    monkeypatch.setattr(request_menu, "ask_priority",
                        lambda parent, r, current: asked.append((r, current)) or -3)
    model, view = w.queues.models["waiting"], w.queues.views["waiting"]
    menus = []
    monkeypatch.setattr("ui.views.queue_tables.request_menu", lambda *a, **kw: menus.append(
        request_menu.request_menu(*a, **kw)) or NoMenu())
    w.queues.tabs.setCurrentWidget(view)
    w.queues._menu("waiting", view.visualRect(model.index(model.row_of(rid), 0)).center())
    menu, = menus
    action = next(a for a in menu.actions() if a.text().startswith("Set priority"))
    assert action.isEnabled() and f"now {old}" in action.text()
    action.trigger()
    assert asked == [(rid, old)] and control.calls[-1] == ("set_priority", rid, -3)
    w.refresh()
    assert model.data(model.index(model.row_of(rid), PRIORITY_COLUMN)) == "-3"
    assert w.banner.isHidden()
    control.step_once()                                 # now the highest: it preempts its way in
    assert rid in [e.request_id for e in source.history[-1].scheduled]
    assert source.history[-1].preempted_ids


def test_no_set_priority_without_the_priority_policy_and_refusals_reach_the_banner(qtbot, monkeypatch):
    source = FakeSource(6)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    model, view = w.queues.models["running"], w.queues.views["running"]
    opened = []

    monkeypatch.setattr("ui.views.queue_tables.request_menu",
                        lambda c, v, parent, priority=None, **kw: opened.append(priority) or NoMenu())
    w.queues.tabs.setCurrentWidget(view)
    w.queues._menu("running", view.visualRect(model.index(0, 0)).center())
    assert opened == [None]                              # fcfs: no "Set priority…"
    control.set_priority(model.request_id(0), 1)         # a client asks anyway: refused, shown
    w.refresh()
    assert w.banner.isVisible() and "policy='priority'" in w.banner.label.text()


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
def test_inject_dialog_passes_priority_under_the_priority_policy(qtbot, policy):
    source = priority_source(4) if policy == "priority" else FakeSource(4)
    control = FakeControl(source)
    d = InjectDialog(control, policy=policy)
    qtbot.addWidget(d)
    assert d.priority.isEnabled() == (policy == "priority")
    d.prompt.setPlainText("move me up")
    d.priority.setValue(-2)
    d.penalties["presence_penalty"].setValue(0.5)
    d.accept()
    sampling = control.calls[-1][-1]
    assert sampling == ({"priority": -2, "presence_penalty": 0.5} if policy == "priority"
                        else {"presence_penalty": 0.5})
    state = source.engine.state()
    assert priorities(state)[d.request_id] == sampling.get("priority", 0)


def test_window_inject_uses_the_runs_policy(qtbot, monkeypatch):
    source = priority_source(4)
    w = shown_window(qtbot, source, FakeControl(source))
    made = []
    monkeypatch.setattr(InjectDialog, "exec", lambda self: made.append(self) or 0)
    w.inject_request()
    assert made and made[0].priority.isEnabled()
