"""The application layer: settings, replay, compare, sweep."""
