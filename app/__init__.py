"""BatchScope entry points and wiring: the ``batchscope`` command, the engine-thread bridge, startup,
and the offline Python API (``from app import LLM, SamplingParams``; see ``app.llm``)."""
import time

PROCESS_START = time.perf_counter()   # for "first token after N s" (import of torch etc. included)


def __getattr__(name: str):
    # Lazy: ``import app.cli`` must not pay for the API's imports.
    if name in ("LLM", "RequestOutput", "RequestMetrics"):
        from app import llm
        return getattr(llm, name)
    if name == "SamplingParams":
        from engine.request import SamplingParams
        return SamplingParams
    raise AttributeError(f"module 'app' has no attribute {name!r}")


__all__ = ["LLM", "RequestMetrics", "RequestOutput", "SamplingParams"]
