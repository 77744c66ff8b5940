"""Subcommands (listed in iodl/cli.py). Each module has add_arguments(parser) and run(comm, args) -> exit status."""
