"""The recording file itself: schema and migrations, opening, row codec, the writer thread and the reader."""
