"""``batchscope bench``: the anchor workload, dummy models, peaks, the run and its figures."""
