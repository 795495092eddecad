"""`python -m mcsdns` is the `mcsdns` command."""

from .cli import main

raise SystemExit(main())
