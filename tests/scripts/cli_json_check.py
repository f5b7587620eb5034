#!/usr/bin/env python3
"""Checks one `megascale SUBCOMMAND --json` document against the fields docs/CLI.md documents.

    cli_json_check.py FILE COMMAND FIELD...     (FILE '-' reads standard input)

FIELD is a dotted path; `[]` steps into every element of a list, which must not be empty:
`rows[].bandwidth_gbps` needs a non-empty list `rows` whose every element has `bandwidth_gbps`. A field
whose name ends in a unit (_bytes, _s, _ms, _us, _ns, _gbps, _GBps, _pct) must hold a number. Exits 1
naming the first field that is missing or of the wrong type.
"""

import json
import sys

UNITS = ("_bytes", "_s", "_ms", "_us", "_ns", "_ps", "_gbps", "_GBps", "_pct", "_bps")


def resolve(node, parts, path):
    if not parts:
        return [(path, node)]
    head, rest = parts[0], parts[1:]
    is_list = head.endswith("[]")
    key = head[:-2] if is_list else head
    if not isinstance(node, dict) or key not in node:
        sys.exit(f"cli_json_check: {path or '<top>'} has no field '{key}'")
    value = node[key]
    here = f"{path}.{key}" if path else key
    if not is_list:
        return resolve(value, rest, here)
    if not isinstance(value, list) or not value:
        sys.exit(f"cli_json_check: {here} must be a non-empty list")
    found = []
    for i, element in enumerate(value):
        found += resolve(element, rest, f"{here}[{i}]")
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, command, fields = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        doc = json.load(sys.stdin if path == "-" else open(path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        sys.exit(f"cli_json_check: {path} does not parse as JSON: {e}")
    if doc.get("command") != command:
        sys.exit(f"cli_json_check: command is {doc.get('command')!r}, expected {command!r}")
    if not isinstance(doc.get("schema_version"), int):
        sys.exit("cli_json_check: schema_version is missing or not an integer")
    for field in fields:
        for where, value in resolve(doc, field.split("."), ""):
            last = field.split(".")[-1].rstrip("[]")
            if last.endswith(UNITS) and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
                sys.exit(f"cli_json_check: {where} is {value!r}, expected a number")
    print(f"cli_json_check: {path}: {command}, {len(fields)} fields present")


if __name__ == "__main__":
    main()
