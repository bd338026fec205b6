"""Writes the key reference of docs/configuration.md from workflow/schemas/config.schema.yaml.

The page's prose, down to the MARKER line, is written by hand; everything after it is this
script's output, so the reference says exactly what the schema says (descriptions, allowed
values, defaults). From the repository root:

    python docs/config_reference.py          # rewrite the reference part of the page
    python docs/config_reference.py --check  # exit 1 when the page is out of date

tests/project/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PAGE = REPO / "docs" / "configuration.md"
MARKER = (
    "<!-- Generated below by docs/config_reference.py from "
    "workflow/schemas/config.schema.yaml: edit the schema, then run the script. -->"
)
# Mappings of named entries whose entries share one definition in `$defs`.
NAMED = {"variants": "variant", "recipes": "recipe"}


def scalar(value) -> str:
    """A value as it is written in the config file (YAML flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def one_line(text: str) -> str:
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    # Outside code spans `<hub dir>` would read as an HTML tag.
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def allowed(node: dict) -> str:
    """What a key accepts: its type, enum and bounds, in a few words."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{scalar(value)}`" for value in node["enum"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    words = []
    for kind in types:
        if kind == "array":
            item = allowed(node.get("items", {})).removeprefix("one of ")
            words.append(f"list of {item}" if item else "list")
        elif kind == "object":
            words.append("mapping")
        else:
            words.append(kind)
    text = " or ".join(words)
    bounds = [
        (">=", node.get("minimum")),
        (">", node.get("exclusiveMinimum")),
        ("<=", node.get("maximum")),
        ("<", node.get("exclusiveMaximum")),
    ]
    limits = [f"{sign} {scalar(value)}" for sign, value in bounds if value is not None]
    if limits:
        text += " (" + ", ".join(limits) + ")"
    if "pattern" in node:
        text += f" matching `{node['pattern']}`"
    if node.get("type") == "array" and node.get("minItems"):
        text += f", at least {node['minItems']}"
    return text


def rows(properties: dict, prefix: str = "") -> list[str]:
    """One table row per leaf key; nested mappings are flattened with dots."""
    out = []
    for name, node in properties.items():
        key = f"{prefix}{name}"
        if node.get("type") == "object" and "properties" in node:
            out.append(f"| `{key}` | mapping | | {one_line(node.get('description', ''))} |")
            out.extend(rows(node["properties"], prefix=f"{key}."))
            continue
        default = f"`{scalar(node['default'])}`" if "default" in node else ""
        out.append(
            f"| `{key}` | {allowed(node)} | {default} | {one_line(node.get('description', ''))} |"
        )
    return out


def table(properties: dict, prefix: str = "") -> list[str]:
    return ["| key | allowed | default | what it does |", "|---|---|---|---|"] + rows(
        properties, prefix
    )


def reference(schema: dict) -> str:
    lines = ["## Key reference", ""]
    lines.append(one_line(schema["description"]))
    lines.append("")
    for name, node in schema["properties"].items():
        lines += [f"### `{name}`", "", one_line(node.get("description", "")), ""]
        if name in NAMED:
            entry = schema["$defs"][NAMED[name]]
            lines += [
                f"Default: `{scalar(node['default'])}`. Each entry, `{name}.<name>`, is "
                f"{one_line(entry['description']).rstrip('.').lower()}; its keys:",
                "",
            ]
            lines += table(entry["properties"])
        elif node.get("type") == "object":
            lines += table(node["properties"])
        else:
            default = scalar(node["default"])
            lines += [f"- allowed: {allowed(node)}", f"- default: `{default}`"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render(page: str, schema: dict) -> str:
    """The page with its reference part rebuilt from the schema."""
    if MARKER not in page:
        raise SystemExit(f"{PAGE}: the marker line is missing; it must read:\n{MARKER}")
    head = page.split(MARKER, 1)[0]
    return f"{head}{MARKER}\n\n{reference(schema)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    page = PAGE.read_text(encoding="utf-8")
    new = render(page, schema)
    if args.check:
        if new != page:
            print(f"{PAGE} is out of date: run python docs/config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
