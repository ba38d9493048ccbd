"""``python -m tfmount``: the ``tfmount`` command."""

from tfmount._cli import main

main()
