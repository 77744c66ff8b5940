"""`iodl probe`: the capabilities iodl found here, as a table or JSON."""
import json

HELP = "show what this machine supports"


def add_arguments(p) -> None:
    p.add_argument("--root", action="append", default=None, metavar="DIR",
                   help="directory to test O_DIRECT on (repeatable; default: the temp dir)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .. import probe

    caps = probe.all_capabilities(args.root)
    if args.json:
        print(json.dumps([c.to_dict() for c in caps], indent=2))
        return 0
    table = Table(title="iodl probe")
    table.add_column("capability")
    table.add_column("ok")
    table.add_column("detail")
    for c in caps:
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.detail)
    Console().print(table)
    return 0
