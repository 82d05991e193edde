"""Incremental detokenization with stop strings (the streaming rule of vLLM's detokenizer): text is
streamed in deltas that never contain characters a later stop-string match would cut."""
from __future__ import annotations


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into streamed text and finds stop strings.

    ``tokenizer`` is a Hugging Face tokenizer (anything with ``decode(ids, skip_special_tokens)``).
    ``stop`` strings are searched in the output only (never the prompt); the earliest match ends
    the text there (after the match if ``include_stop``). While stop strings are set, the last
    ``max(len(stop)) - 1`` characters are held back until they cannot start a match.
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = (), include_stop: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self.include_stop = include_stop
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.text = ""
        self.num_emitted = 0
        self.final: str | None = None
        self.prefix_offset = 0          # output tokens before this one are decoded for good
        self.read_offset = 0            # ... and those before this one are in self.text

    def update(self, output_ids: list[int]) -> tuple[str, str | None]:
        """Decode ``output_ids`` (all output tokens so far; the list only grows). Returns
        ``(delta, matched_stop)``: the new streamable text and the stop string that fired (None
        if none). Only a window is decoded each call, as vLLM's ``detokenize_incrementally`` does:
        the text of ``output_ids[prefix_offset:]`` minus that of ``output_ids[prefix_offset:read_offset]``
        is what the new tokens add (decoding in context keeps tokenizers whose pieces depend on
        their neighbours right); a result ending in U+FFFD (an incomplete UTF-8 sequence) waits
        for more tokens. Cost per call: the window, not the whole output."""
        decode = self.tokenizer.decode
        prefix = decode(output_ids[self.prefix_offset:self.read_offset], skip_special_tokens=True)
        window = decode(output_ids[self.prefix_offset:], skip_special_tokens=True)
        start = max(0, len(self.text) - self.hold)
        if len(window) > len(prefix) and not window.endswith("\ufffd"):
            self.text += window[len(prefix):]
            self.prefix_offset, self.read_offset = self.read_offset, len(output_ids)
        full = self.text
        self.text = full
        best: tuple[int, str] | None = None
        for s in self.stop:
            p = full.find(s, start)
            if p >= 0 and (best is None or p < best[0]):
                best = (p, s)
        if best is not None:
            p, s = best
            self.final = full[:p + len(s)] if self.include_stop else full[:p]
            return self._emit(len(self.final), self.final), s
        return self._emit(len(full) - self.hold if self.stop else len(full), full), None

    def flush(self) -> str:
        """Everything not yet streamed (call when the request finishes)."""
        text = self.final if self.final is not None else self.text
        return self._emit(len(text), text)

    @property
    def output_text(self) -> str:
        """Final text if a stop string fired, else everything decoded so far."""
        return self.final if self.final is not None else self.text

    @property
    def streamed_text(self) -> str:
        """What the deltas returned so far add up to (the final text of a request that ends without
        a last token, e.g. aborted: held-back characters were never shown)."""
        return (self.final if self.final is not None else self.text)[:self.num_emitted]

    def _emit(self, upto: int, text: str) -> str:
        if upto <= self.num_emitted:
            return ""
        delta = text[self.num_emitted:upto]
        self.num_emitted = upto
        return delta
