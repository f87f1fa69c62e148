"""The snapshot's JSON Schema, generated from the dataclasses of slurmdiag/snapshot.py.

``snapshot_json_schema()`` walks the type hints of ``Snapshot`` and every dataclass it reaches;
the result is checked in as docs/snapshot.schema.json, and a test keeps the two equal and
validates real snapshots against it. Regenerate with::

    python -m slurmdiag.schema > docs/snapshot.schema.json

Unknown keys are allowed (``Snapshot.from_json`` ignores them, so newer snapshots still load);
required keys are the fields without a default.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from typing import Any, Union

SCHEMA_ID = "https://slurmdiag.invalid/snapshot.schema.json"
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
}


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if tp is type(None):
        return {"type": "null"}
    if origin in (Union, types.UnionType):
        options = [_type_schema(arg, defs) for arg in typing.get_args(tp)]
        return {"anyOf": options}
    if origin is tuple or origin is list:
        args = typing.get_args(tp)
        return {"type": "array", "items": _type_schema(args[0], defs) if args else {}}
    if origin is dict:
        args = typing.get_args(tp)
        value = _type_schema(args[1], defs) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: a recursive reference stops here
            defs[name] = _dataclass_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for type {tp!r}")


def _dataclass_schema(cls: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    properties = {}
    required = []
    for f in dataclasses.fields(cls):
        properties[f.name] = _type_schema(hints[f.name], defs)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(f"{cls.__name__}("):  # not the dataclass's generated signature
        schema["description"] = " ".join(doc.split())
    return schema


def snapshot_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of snapshot.json, from the dataclasses."""
    from slurmdiag.snapshot import SCHEMA_VERSION, Snapshot

    defs: dict[str, Any] = {}
    root = _dataclass_schema(Snapshot, defs)
    root["properties"]["schema"] = {"type": "integer", "minimum": 1, "maximum": SCHEMA_VERSION}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"slurmdiag snapshot (schema {SCHEMA_VERSION})",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(snapshot_json_schema(), indent=1, sort_keys=False) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(schema_text())
