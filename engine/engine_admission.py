"""Request admission of :class:`engine.engine.LLMEngine`: ``add_request`` (id checks, parallel
sampling's sequences, future arrivals) and moving due arrivals into the scheduler (recorded, with
a detokenizer per request when a tokenizer is set). A mixin (it uses the engine's scheduler,
clock, recorder and per-step change lists); kept apart so the step loop reads on its own.
"""
from __future__ import annotations

import heapq

from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import Arrival
from engine.request import Request, SamplingParams
from engine.sequence_group import make_sequences, sequence_ids


class EngineAdmission:
    """``add_request`` / ``admit_due`` of :class:`engine.engine.LLMEngine`."""

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams, *,
                    request_id: str | None = None, arrival_time: float | None = None,
                    prompt_text: str | None = None, priority: int | None = None) -> str:
        """Add a request arriving at ``arrival_time`` (engine clock; None = now). Returns its id.
        ``priority`` (default ``params.priority``) orders it under ``policy="priority"``. With
        ``params.n`` > 1 the prompt's ``n`` sequences are requests ``<id>#0`` ... and ``<id>``
        names them all in :meth:`abort_request` and the other calls (``engine.sequence_group``).

        An impossible request (empty prompt, over ``max_model_len`` or the whole cache) is kept and
        finished at once with FINISHED_ERROR and an error naming the limit; others keep running.
        Raises ``ValueError`` for a duplicate id or stop strings without a tokenizer. Ids are
        unique within a run: checked against live requests in memory and against finished ones
        through the recording, or without one through 64-bit hashes (``engine.request_ids``).
        """
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer; this engine runs on token ids only")
        now = self.now()
        at = now if arrival_time is None else arrival_time
        # The caller's sequence is kept as is: a compact array('i') stays 4 bytes per token.
        reqs = make_sequences(rid, prompt_token_ids, params, arrival_time=at, prompt_text=prompt_text,
                              eos_token_id=self.eos_token_id, priority=priority)
        self._request_ids.add([rid, *sequence_ids(rid, params.n)])
        for req in reqs:
            if at <= now:
                self._admit(req)
            else:
                heapq.heappush(self._future, (at, next(self._seq), req))
        return rid

    def _admit(self, req: Request) -> None:
        req.arrival_step = self.step_index
        if self.recorder is not None:
            sp = req.sampling_params
            try:
                self.recorder.write_request(req.request_id, req.arrival_step, req.arrival_time,
                                            req.prompt_token_ids, req.prompt_text,
                                            {**{k: getattr(sp, k) for k in sp.__dataclass_fields__},
                                             "priority": req.priority})
            except Exception as e:  # noqa: BLE001
                self._recorder_failed(e)
        self._arrival_index[req.request_id] = len(self._arrivals)
        # The Arrival alone says "WAITING, nothing computed": no transition unless something
        # else happens to the request (rejection, admission) before the step is recorded.
        self._arrivals.append(Arrival(req.request_id, req.arrival_step, req.arrival_time,
                                      req.num_prompt_tokens, req.sampling_params.max_tokens,
                                      req.priority))
        self._state = None
        if not self.scheduler.add_request(req):
            self._collect_finished(release=False)   # rejected: the runner never saw it
            return
        if self.tokenizer is not None:
            sp = req.sampling_params
            self._detok[req.request_id] = IncrementalDetokenizer(self.tokenizer, sp.stop,
                                                                 sp.include_stop_str_in_output)

    def admit_due(self) -> None:
        """Move requests whose arrival time has come into the scheduler's waiting queue."""
        self._admit_due()

    def _admit_due(self) -> None:
        if (self.config.clock == "sim" and self._future and not self.scheduler.waiting
                and not self.scheduler.running):
            # Simulated time: nothing can run until the next arrival, so jump to it.
            self._sim_time = max(self._sim_time, self._future[0][0])
        now = self.now()
        while self._future and self._future[0][0] <= now:
            self._admit(heapq.heappop(self._future)[2])
