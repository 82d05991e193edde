"""The live window's engine side: the worker thread and its control surface, the StepSource fed by it."""
