"""Subcommands. Each module has HELP, add_arguments(parser) and run(args) -> exit status."""
