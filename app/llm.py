"""An offline Python API for notebooks and scripts, shaped like vLLM's ``LLM``::

    from app import LLM, SamplingParams

    llm = LLM("default", max_num_seqs=8)                   # any EngineConfig knob by name
    outs = llm.generate(["Hello", "The sky is"], SamplingParams(max_tokens=32), record="run.sqlite")
    print(outs[0].text, outs[0].metrics.time_to_first_token)

The model is loaded once (``app.factory.build_engine``, the same path as the ``batchscope``
command) and, as in vLLM, one ``LLMEngine`` serves every :meth:`LLM.generate` call: request ids
are unique across calls and the prefix cache (``enable_prefix_caching=True``) carries over from
one call to the next (``RequestOutput.num_cached_tokens``). A recorded call (``record=``) runs on
an engine of its own over the same model and KV memory, from step 0 with an empty cache, so its
recording holds exactly that call and opens with ``recordings.file.reader.Reader`` like any other.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import itertools
import numbers
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

from tqdm import tqdm

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import Request, SamplingParams
from engine.request_ids import IdHashes
from engine.sequence_group import sequence_ids
from engine.vocab import Executor

Prompt = Union[str, Sequence[int]]
SIM_KNOBS = ("executor", "sim_model", "sim_device", "sim_cost")


@dataclass(frozen=True)
class RequestMetrics:
    """One request's latencies (vLLM's names), on the engine clock: seconds under the default
    ``wall`` clock, steps under ``clock="virtual"``, simulated seconds under ``sim``.
    ``None`` where undefined (no token was generated; fewer than two tokens for the TPOT)."""

    arrival_time: float
    first_token_time: float | None
    finished_time: float | None
    time_to_first_token: float | None
    time_per_output_token: float | None      # mean gap between consecutive output tokens
    e2e_request_latency: float | None
    num_preemptions: int


@dataclass(frozen=True)
class RequestOutput:
    """The result of one prompt. ``text`` is ``None`` when the model has no tokenizer;
    ``finish_reason`` is ``stop``, ``length``, ``abort`` or ``error`` (then ``error`` says why:
    a prompt longer than ``max_model_len`` or the KV cache is rejected, not raised).
    ``sequences`` are the ``SamplingParams.n`` sequences sampled for the prompt, each a
    ``RequestOutput`` of its own (request id ``<id>#k`` when ``n`` > 1, its own tokens, text,
    finish reason and metrics; its ``sequences`` empty); the fields above are the first one's,
    but ``request_id``, the prompt's. ``num_cached_tokens``: prompt tokens served from the prefix
    cache at its (first) admission (vLLM's field; 0 without ``enable_prefix_caching``)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str | None
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: str | None
    error: str | None
    metrics: RequestMetrics
    num_cached_tokens: int = 0
    sequences: tuple["RequestOutput", ...] = ()


def known_knobs() -> list[str]:
    """Keyword arguments :class:`LLM` accepts besides ``model``: ``EngineConfig``'s fields and the
    simulated executor's."""
    return sorted({f.name for f in dataclasses.fields(EngineConfig)} - {"model"} | set(SIM_KNOBS))


def engine_config(model: str | Path, knobs: dict) -> EngineConfig:
    """The config of ``LLM(model, **knobs)``: the clock defaults to ``wall`` (``sim`` with
    ``executor="sim"``, whose ``sim_model`` defaults to ``model``). Raises ``TypeError`` naming an
    unknown knob and listing the known ones, ``engine.config.ConfigError`` for a bad value."""
    known = known_knobs()
    for name in knobs:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"LLM() got an unknown engine knob {name!r}{hint}; known knobs: {', '.join(known)}")
    executor = knobs.pop("executor", "model")
    if executor == Executor.SIM:
        from engine.sim.config import SimConfig

        knobs.setdefault("sim_model", str(model))
        return SimConfig(model=str(model), **{"clock": "sim", **knobs})
    given = [k for k in SIM_KNOBS if k in knobs]
    if executor != Executor.MODEL or given:
        raise TypeError(f"{', '.join(given) or f'executor={executor!r}'}: the simulated executor's knobs "
                        f"need executor='sim' (executor is 'model' or 'sim')")
    return EngineConfig(model=str(model), **{"clock": "wall", **knobs})


class LLM:
    """A model loaded once, generating for batches of prompts with continuous batching.

    ``model``: ``"default"`` (the embedded SmolLM2-135M-Instruct), a local transformers
    Llama-family folder, or with ``executor="sim"`` a simulated model shape. ``engine_knobs``: any
    ``EngineConfig`` field by its vLLM name (``max_num_seqs``, ``max_num_batched_tokens``,
    ``block_size``, ``num_gpu_blocks``, ``max_model_len``, ``device``, ``dtype``, ``seed``,
    ``clock``...). Raises ``TypeError`` for an unknown knob (naming it and the known ones),
    ``engine.config.ConfigError`` for a bad value, ``engine.model.files.ModelLoadError`` when the
    model does not load. ``tokenizer`` is the model's (``None`` for token-id-only models); it
    can be replaced before a :meth:`generate` call.
    """

    def __init__(self, model: str | Path = "default", **engine_knobs) -> None:
        from app.factory import build_engine

        self.config = engine_config(model, dict(engine_knobs))
        built = build_engine(self.config, progress=False)
        self.config = built.config            # resolved: device, dtype, num_gpu_blocks
        self.run_info = built.run_info
        self.tokenizer = built.tokenizer
        self.vocab_size = built.vocab_size
        self._runner = built.engine.runner
        self._eos_token_id = built.engine.eos_token_id
        self._ids = itertools.count()
        self.engine = built.engine            # serves every unrecorded call (module doc)
        self._done: dict[str, Request] = {}   # finished, not yet returned (emptied by each call)
        self.engine.add_finished_listener(self._finished)
        self._used_ids = IdHashes()           # every id of every call: unique across engines

    def _finished(self, req: Request) -> None:
        self._done[req.request_id] = req

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *,
                 request_ids: Sequence[str] | None = None, record: str | Path | None = None,
                 overwrite: bool = False, use_tqdm: bool = True) -> list[RequestOutput]:
        """Generate for every prompt; returns one :class:`RequestOutput` per prompt, in input order.

        ``prompts``: a string, a list of token ids, or a list of those (strings are encoded with
        the tokenizer, special tokens added as vLLM does; no chat template). ``sampling_params``:
        one for all prompts (default ``SamplingParams()``: greedy, 16 tokens) or one per prompt.
        ``request_ids``: the caller's id for each prompt (strings, unique across every call of
        this ``LLM``), else ``"0"``, ``"1"``, ... (unique across calls); a prompt sampled with
        ``n`` > 1 (parallel sampling) has its ``n`` results in ``RequestOutput.sequences``. ``record``: also write the
        run to this recording file (``recordings.file.writer.RecordingWriter``; an existing file is replaced only
        with ``overwrite=True``). ``use_tqdm``: a progress
        bar of finished requests on stderr. Raises ``ValueError`` for a text prompt without a
        tokenizer, a list of sampling params of the wrong length, or stop strings without a
        tokenizer, ``request_ids`` of the wrong length, empty, repeated or used before;
        ``TypeError`` for a prompt of another type; ``recordings.errors.RecordingError`` when
        ``record`` cannot be created or exists and ``overwrite`` is False.
        """
        items = self._prompts(prompts)
        params = self._params(sampling_params, len(items))
        encoded = [(p, self._encode(p)) for p in items]
        if self.tokenizer is None and any(sp.stop for sp in params):   # before a file is created
            raise ValueError("stop strings need a tokenizer; this model runs on token ids only")
        names = self._request_ids(request_ids, len(items))
        writer = None
        engine, done = self.engine, self._done
        if record is not None:
            from recordings.file.writer import RecordingWriter

            info = self.run_info.replace(source="app.llm.LLM.generate",
                                         started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            writer = RecordingWriter(record, info, overwrite=overwrite)
            engine = LLMEngine(self.config, self._runner, self.config.num_gpu_blocks,
                               tokenizer=self.tokenizer, eos_token_id=self._eos_token_id, recorder=writer)
            done = engine.collect_finished()
        engine.tokenizer = self.tokenizer          # (it may have been replaced since)
        for name in names:
            self._used_ids.add(name)
        rids: list[str] = []
        try:
            try:
                for name, (p, ids), sp in zip(names, encoded, params):
                    rids.append(engine.add_request(ids, sp, request_id=name,
                                                   prompt_text=p if isinstance(p, str) else None))
            except Exception:
                for rid in rids:                 # a refused prompt: the call adds nothing
                    engine.abort_request(rid)
                engine.step(run_batch=False)
                done.clear()
                raise
            self._run(engine, done, sum(sp.n for sp in params), use_tqdm)
        finally:
            if writer is not None:
                writer.close()
        if engine.recorder_error:
            warnings.warn(f"{record}: {engine.recorder_error}", RuntimeWarning, stacklevel=2)
        outs = [self._prompt_output(done, rid, sp.n, prompt) for rid, sp, prompt in zip(rids, params, items)]
        done.clear()
        return outs

    def _request_ids(self, given: Sequence[str] | None, n: int) -> list[str]:
        """The ids of a call's ``n`` prompts: ``given`` checked (strings, non-empty, unique,
        never used by this ``LLM``), or the next of ``"0"``, ``"1"``, ... not used yet."""
        if given is None:
            out = []
            while len(out) < n:
                name = str(next(self._ids))
                if name not in self._used_ids:
                    out.append(name)
            return out
        if isinstance(given, str):
            given = [given]
        names = list(given)
        if len(names) != n:
            raise ValueError(f"request_ids: give one id per prompt ({n} prompts, got {len(names)} ids)")
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"request_ids: each id must be a non-empty string, got {name!r}")
            if "#" in name:
                raise ValueError(f"request_ids: {name!r} contains '#', which names parallel-sampling "
                                 "sequences (<id>#k)")
        repeated = sorted({x for x in names if names.count(x) > 1})
        if repeated:
            raise ValueError(f"request_ids: {repeated[0]!r} is given twice (ids are unique)")
        used = [x for x in names if x in self._used_ids]
        if used:
            raise ValueError(f"duplicate request id {used[0]!r}: used by an earlier generate() call "
                             "of this LLM (ids are unique across calls)")
        return names

    def _prompt_output(self, done: dict, request_id: str, n: int, prompt: Prompt) -> RequestOutput:
        """The output of the prompt added as ``request_id``: its first sequence's fields and all
        ``n`` sequences."""
        seqs = tuple(self._output(done[rid], prompt) for rid in sequence_ids(request_id, n))
        return dataclasses.replace(seqs[0], request_id=request_id, sequences=seqs)

    @staticmethod
    def _run(engine: LLMEngine, done: dict, total: int, use_tqdm: bool) -> None:
        with tqdm(total=total, unit="req", desc="generating", disable=not use_tqdm, dynamic_ncols=True) as bar:
            while engine.has_unfinished:
                engine.step()
                if len(done) != bar.n:
                    bar.update(len(done) - bar.n)
            if engine.has_pending_changes:      # rejections (and their records) after the last step
                engine.step(run_batch=False)
            bar.update(len(done) - bar.n)

    @staticmethod
    def _prompts(prompts) -> list[Prompt]:
        if isinstance(prompts, str):
            return [prompts]
        items = list(prompts)
        if items and all(isinstance(t, numbers.Integral) for t in items):
            return [[int(t) for t in items]]             # one prompt of token ids
        out: list[Prompt] = []
        for i, p in enumerate(items):
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, Sequence) and all(isinstance(t, numbers.Integral) for t in p):
                out.append([int(t) for t in p])
            else:
                raise TypeError(f"prompt {i} is a {type(p).__name__}: expected a string or a list of token ids")
        return out

    @staticmethod
    def _params(sampling_params, n: int) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams()] * n
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * n
        params = list(sampling_params)
        if len(params) != n or not all(isinstance(p, SamplingParams) for p in params):
            raise ValueError(f"sampling_params: give one SamplingParams or a list of one per prompt "
                             f"({n} prompts, got {len(params)} items)")
        return params

    def _encode(self, prompt: Prompt) -> list[int]:
        if not isinstance(prompt, str):
            return list(prompt)
        if self.tokenizer is None:
            raise ValueError(f"this model ({self.run_info.model_name}) has no tokenizer: pass "
                             f"prompts as lists of token ids in [0, {self.vocab_size})")
        return list(self.tokenizer.encode(prompt))

    def _output(self, req: Request, prompt: Prompt) -> RequestOutput:
        e2e = None if req.finished_time is None else req.finished_time - req.arrival_time
        metrics = RequestMetrics(req.arrival_time, req.first_token_time, req.finished_time, req.ttft,
                                 req.mean_itl, e2e, req.num_preemptions)
        reason = req.finish_reason
        return RequestOutput(
            request_id=req.request_id, prompt=prompt if isinstance(prompt, str) else None,
            prompt_token_ids=list(req.prompt_token_ids),
            text=req.output_text if self.tokenizer is not None else None,
            token_ids=list(req.output_token_ids), finish_reason=reason.value if reason else None,
            stop_reason=req.stop_reason, error=req.error, metrics=metrics,
            num_cached_tokens=max(0, req.num_cached_tokens))
