"""Look: the dark theme and one stable colour per request."""
