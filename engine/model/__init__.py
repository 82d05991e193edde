"""Model files: resolving a spec to a transformers folder, converting the built-in GGUF, tiny test models."""
