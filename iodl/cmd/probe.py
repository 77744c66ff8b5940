"""`iodl probe`: the capabilities iodl found here, as a table or JSON."""
import json

from rich.table import Table

from .. import probe
from ..report import make_console


def add_arguments(p) -> None:
    p.add_argument("--root", action="append", default=None, metavar="DIR",
                   help="directory to test O_DIRECT on (repeatable; default: the temp dir)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(comm, args) -> int:
    caps = probe.all_capabilities(args.root)
    if args.json:
        print(json.dumps([c.to_dict() for c in caps], indent=2))
        return 0
    table = Table(title="iodl probe")
    # folded, never cut: a long --root path wraps onto more lines within the console's width
    table.add_column("capability", overflow="fold")
    table.add_column("ok")
    table.add_column("detail", overflow="fold")
    for c in caps:
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.detail)
    make_console().print(table)
    return 0
