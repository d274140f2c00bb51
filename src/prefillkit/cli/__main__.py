"""``python -m prefillkit.cli``: the ``prefillkit`` command line."""

from prefillkit.cli import main

if __name__ == "__main__":
    main()
