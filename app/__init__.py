"""BatchScope entry points and wiring: the ``batchscope`` command, the engine-thread bridge, startup."""
