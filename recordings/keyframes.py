"""The writer's view of the engine state, from which it cuts a keyframe every N steps."""
from __future__ import annotations

from engine.outputs import RequestView, StepRecord
from recordings import codec


class KeyframeState:
    """The writer's running copy of the engine state and its keyframe schedule.

    A mutable twin of ``EngineState.apply`` (a step costs O(changed requests), not O(all
    requests)); :meth:`to_json` gives the keyframe of the current state.
    """

    def __init__(self, num_total_blocks: int, block_size: int, max_num_seqs: int) -> None:
        self.step, self.clock = -1, 0.0
        self.layout = (num_total_blocks, block_size, max_num_seqs)
        self.requests: dict[str, RequestView] = {}
        self.last_keyframe = -1

    def apply(self, record: StepRecord, interval: int) -> bool:
        """Advance to after ``record``; True when this step is due a keyframe."""
        for view in record.changed:
            self.requests[view.request_id] = view
        self.step, self.clock = record.step, record.clock
        if self.step - self.last_keyframe >= interval:
            self.last_keyframe = self.step
            return True
        return False

    def to_json(self) -> str:
        """The current state as keyframe JSON (see ``codec.state_json``)."""
        return codec.state_json(self.step, self.clock, *self.layout, self.requests.values())
