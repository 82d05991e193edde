"""The engine's vocabulary: every word it records, as string enums (vLLM v1's names where vLLM has one).

Each enum is a :class:`enum.StrEnum`: a member *is* its stored string (``RequestStatus.RUNNING ==
"RUNNING"``, ``str()``, f-strings and ``json.dumps`` give the value), so records, recordings and
exports store exactly the text they always did, and old recordings read back as members
(``EventKind("preempted")``). Code compares members, never literals. New words are only ever
added: a recording written by older code must keep reading. No torch, no numpy.
"""
from __future__ import annotations

import enum


class Word(enum.StrEnum):
    """A word of the vocabulary: a ``StrEnum`` whose ``repr`` is its stored text's (``'sim'``), so a
    message that quotes a knob or a status with ``!r`` reads as it did when these were strings."""

    def __repr__(self) -> str:
        return repr(self._value_)


class RequestStatus(Word):
    """Where a request is. Exactly one queue holds each unfinished request (invariant G3)."""

    WAITING = "WAITING"                  # arrived, not yet admitted (holds no blocks)
    RUNNING = "RUNNING"                  # admitted: holds a batch slot and KV blocks
    PREEMPTED = "PREEMPTED"              # evicted by recompute preemption, waiting to recompute
    PAUSED = "PAUSED"                    # held by the user: keeps its KV, holds no batch slot
    SWAPPED = "SWAPPED"                  # preempted by swap: its KV waits in the CPU swap pool
    FINISHED_STOPPED = "FINISHED_STOPPED"  # EOS, stop token or stop string
    FINISHED_LENGTH = "FINISHED_LENGTH"    # max_tokens reached
    FINISHED_ABORTED = "FINISHED_ABORTED"  # aborted by the user
    FINISHED_ERROR = "FINISHED_ERROR"      # rejected at admission or failed in a step

    @property
    def is_finished(self) -> bool:
        return self.name.startswith("FINISHED")


# The int8 code of each status in EngineState's ``status`` column and in keyframes: new codes are
# only ever appended (recordings store the codes).
STATUS_CODES: tuple[RequestStatus, ...] = (
    RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED, RequestStatus.PAUSED,
    RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED,
    RequestStatus.FINISHED_ERROR, RequestStatus.SWAPPED)


class FinishReason(Word):
    """Why a request finished, as an OpenAI-style API reports it."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


FINISH_REASON_OF: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}


class EventKind(Word):
    """A request's lifecycle event (``RequestEvent.kind``, the ``events`` table)."""

    ARRIVED = "arrived"
    SCHEDULED = "scheduled"              # admitted into the running batch (again, after a preemption)
    PREEMPTED = "preempted"              # detail: a PreemptionInfo (engine.sched.preemption)
    PAUSED = "paused"
    RESUMED = "resumed"
    PRIORITY = "priority"                # the user set its priority; detail: the new value
    MOVED_TO_FRONT = "moved_to_front"
    FORKED = "forked"                    # a parallel-sampling sequence joined its group; detail: the head's id
    PREFIX_CACHE = "prefix_cache"        # a prefix-cache lookup; detail: engine.kv.prefix_explain's JSON
    PREFIX_CACHE_WAITING = "prefix_cache_waiting"   # a waiting request's lookup in a step it was not
                                                    # admitted (when it changed); detail: the same JSON
    FINISHED = "finished"                # stop or length
    ABORTED = "aborted"
    FAILED = "failed"                    # an error while it ran
    REJECTED = "rejected"                # refused at arrival (too long for max_model_len, ...)
    ADMISSION_REJECTED = "admission_rejected"   # admission control refused it (before its REJECTED);
    #                                             detail: engine.sched.admission.Rejection's JSON


class NotAdmittedReason(Word):
    """Why a waiting request was not admitted in a step (``StepRecord.not_admitted``)."""

    TOKEN_BUDGET = "token_budget"        # max_num_batched_tokens already spent
    NO_FREE_BLOCKS = "no_free_blocks"    # the block pool cannot hold its prefill
    SEQ_CAP = "seq_cap"                  # max_num_seqs requests already running
    BEHIND = "behind_older"              # FCFS: an older waiting request is blocked
    LOWER_PRIORITY = "lower_priority"    # priority: a higher-priority request is blocked
    STATIC_BATCH = "static_batch"        # static: the current batch has not finished
    SWAPPED_FIRST = "swapped_first"      # swap: swapped-out requests resume first


class BlockEventKind(Word):
    """What happened to KV blocks in a step (``BlockEvent.kind``, the ``block_events`` table)."""

    ALLOCATED = "allocated"      # taken off the free queue, appended to the request's table
    FREED = "freed"              # the request's whole table released (each block loses a reference)
    HIT = "hit"                  # cached blocks shared into a request's table (prefix-cache hit)
    FORKED = "forked"            # a parallel-sampling sequence shares its group's prompt blocks
    CACHED = "cached"            # full, written blocks tagged with their prefix hash
    EVICTED = "evicted"          # cached-free blocks handed out again: their hash is dropped
    SWAPPED_OUT = "swapped_out"  # CPU swap blocks given to a request (its KV copied out)
    SWAPPED_IN = "swapped_in"    # a request's CPU swap blocks released (its KV copied back)
    RESERVED = "reserved"        # free blocks taken out of use (pool shrunk; no request: '')
    UNRESERVED = "unreserved"    # blocks given back to use (pool grown; no request: '')


class PreemptionReason(Word):
    """Why a running (or paused) request lost its KV (``PreemptionInfo.reason``)."""

    NEEDED_BLOCKS = "no_free_blocks"      # a running request needed a block and none was free
    FOR_PRIORITY = "priority"             # made room for a waiting request of strictly higher priority
    PAUSED_KV = "paused_kv_taken"         # a user-paused request's KV was taken so others can run
    POOL_SHRUNK = "kv_pool_shrunk"        # the user shrank the usable KV pool
    SLOTS_CUT = "max_num_seqs_lowered"    # the user lowered max_num_seqs below its batch slot


class PreemptionMode(Word):
    """What a preemption did with the victim's KV (``PreemptionInfo.mode``; the knob is ``preemption_mode``)."""

    RECOMPUTE = "recompute"
    SWAP = "swap"
    SWAP_FALLBACK = "recompute_fallback"   # swap mode, but the CPU swap pool had no room


class Policy(Word):
    """Which waiting request gets a batch slot (``EngineConfig.policy``)."""

    FCFS = "fcfs"            # by arrival: continuous batching
    PRIORITY = "priority"    # by SamplingParams.priority, lower first; a strictly higher one may preempt
    STATIC = "static"        # the baseline: a new batch only when the whole previous batch finished


class Clock(Word):
    """The engine clock of a run (``EngineConfig.clock``)."""

    VIRTUAL = "virtual"      # the step index: reproducible schedules
    WALL = "wall"            # seconds since start, paused time left out
    SIM = "sim"              # simulated seconds from a simulated executor's step durations


class Admission(Word):
    """``EngineConfig.admission``: who is let into the waiting queue (``engine.sched.admission``)."""

    ALL = "all"              # every request that can ever fit (vLLM)
    SLO = "slo"              # not one whose predicted TTFT exceeds the SLO (Mooncake's early rejection)


class ModelImpl(Word):
    """``EngineConfig.model_impl``: whose forward pass runs the model (vLLM's ``--model-impl``)."""

    AUTO = "auto"                    # ours for a supported architecture, else transformers'
    BATCHSCOPE = "batchscope"        # the engine's fused Llama-family forward (engine.runner.forward.llama)
    TRANSFORMERS = "transformers"    # transformers' model with our paged attention plugged in


class AdmissionRejection(Word):
    """Why admission control turned a request away (``Rejection.reason``)."""

    SLO_TTFT = "slo_ttft"            # its predicted TTFT exceeds slo_ttft_ms, at arrival
    QUEUE_TIMEOUT = "queue_timeout"  # it waited max_queue_time without being admitted


class Executor(Word):
    """What executes a step (``--executor``)."""

    MODEL = "model"          # a real forward pass
    SIM = "sim"              # the simulated executor: roofline step times, synthetic tokens


def values(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """The stored strings of an enum, in declaration order (for argparse ``choices`` and messages)."""
    return tuple(m.value for m in kind)


def word(kind: type[enum.StrEnum], text: str) -> enum.StrEnum | str:
    """The member of ``kind`` stored as ``text``, or ``text`` itself for a word this code does not
    know (a recording written by newer code: it still reads, the word shows as stored)."""
    return kind._value2member_map_.get(text, text)
