"""Progress-bar columns that say what they count (``requests finished 417 / 12,031``)."""

from __future__ import annotations

from typing import Any

from rich.progress import ProgressColumn, Task
from rich.text import Text

__all__ = ["CountColumn", "count_text"]


def count_text(what: str, completed: float, total: float | None) -> str:
    """``requests finished 417 / 12,031`` (thousands separators; no total: ``417``)."""
    done = f"{int(completed):,}"
    if total is None:
        return f"{what} {done}"
    return f"{what} {done} / {int(total):,}"


class CountColumn(ProgressColumn):
    """``WHAT done / total`` of a task, with thousands separators."""

    def __init__(self, what: str, **kwargs: Any) -> None:
        self.what = what
        super().__init__(**kwargs)

    def render(self, task: Task) -> Text:
        return Text(count_text(self.what, task.completed, task.total), style="progress.download")
