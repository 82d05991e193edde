"""The window's dialogs: inject a request, change knobs, check findings, run summary."""
