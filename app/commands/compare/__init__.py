"""``batchscope compare``: configs, the command and its HTML report."""
