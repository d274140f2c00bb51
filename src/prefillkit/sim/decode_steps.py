"""The decode steps of a colocated run: ``(start, duration)`` pairs, 16 bytes a step."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

__all__ = ["DecodeSteps"]


class DecodeSteps(Sequence[tuple[float, float]]):
    """A read-only sequence of ``(start_s, duration_s)`` over two arrays of doubles.

    NOTE: a colocated run has millions of decode steps (the conversation trace with
    ``--max-running-requests 1``: 4 M); a list of float pairs took 600 MB there, these
    arrays 64 MB."""

    __slots__ = ("durations", "starts")

    def __init__(self, starts: array, durations: array) -> None:
        if len(starts) != len(durations):
            raise ValueError(f"{len(starts)} starts but {len(durations)} durations")
        self.starts = starts
        self.durations = durations

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, i: int) -> tuple[float, float]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[float, float]]: ...

    def __getitem__(self, i: int | slice) -> tuple[float, float] | list[tuple[float, float]]:
        if isinstance(i, slice):
            return list(zip(self.starts[i], self.durations[i], strict=True))
        return (self.starts[i], self.durations[i])

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.starts, self.durations, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DecodeSteps):
            return self.starts == other.starts and self.durations == other.durations
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DecodeSteps({len(self)} steps)"
