"""Which workloads take a block size (``--block-size``): the one owner of that rule.

A block size is the number of tokens one hash id stands for. Trace formats whose rows
carry hash ids (Mooncake, Bailian) and the generators that draw hash ids (``agentic``,
``seed``) take one; the others carry token counts or token ids and take none. Callers
name the flag or key in their own message (the CLI ``--block-size``, the readers
``block_size``).
"""

from __future__ import annotations

#: Trace formats whose rows carry no hash ids, so no block size applies.
FORMATS_WITHOUT_BLOCKS: tuple[str, ...] = ("azure", "jsonl")
#: Generators whose prompts are tokens, not hash ids (why, in the message).
GENERATORS_WITHOUT_BLOCKS: dict[str, str] = {"gsp": "token prompts"}


def block_size_refusal(*, fmt: str | None = None, generator: str | None = None) -> str | None:
    """Why a block size does not apply to trace format ``fmt`` or generator ``generator``
    (``"does not apply to ..."``), None when it does or the source is not one of these."""
    if fmt in FORMATS_WITHOUT_BLOCKS:
        return f"does not apply to the {fmt} format"
    if generator is not None and generator in GENERATORS_WITHOUT_BLOCKS:
        return f"does not apply to --generator {generator} ({GENERATORS_WITHOUT_BLOCKS[generator]})"
    return None
