"""One module (or package) per ``batchscope`` subcommand."""
