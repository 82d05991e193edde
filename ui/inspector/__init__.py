"""The selected request: inspector form, explanations, forensics and its context menu."""
