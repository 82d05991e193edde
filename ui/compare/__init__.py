"""The compare window: several recordings of one workload side by side."""
