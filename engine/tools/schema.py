"""A small JSON Schema checker for tool arguments (the subset tool schemas use).

Supported: ``type`` (one or a list), ``properties``, ``required``, ``additionalProperties``
(``false`` or a schema), ``enum``, ``items``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``minItems``/``maxItems``. Unknown keywords are ignored, so a schema richer than this subset is
checked only as far as this subset goes; tools that need more validate with a pydantic model.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "integer": (int,),
    "number": (int, float),
}


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False  # JSON has no bool-as-int
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def check_schema(value: Any, schema: dict[str, Any], *, path: str = "") -> list[str]:
    """What is wrong with ``value`` against ``schema``: readable messages, ``[]`` when valid."""
    where = path or "arguments"
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(value, n) for n in names):
            return [f"{where}: expected {' or '.join(names)}, got {type(value).__name__}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        problems.append(f"{where}: must be one of {allowed}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where}: too short")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: too long")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: must be at most {schema['maximum']}")
    if isinstance(value, list | tuple):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: at most {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                problems.extend(check_schema(item, items, path=f"{path}[{i}]"))
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{_join(path, key)}: required")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                problems.extend(check_schema(item, props[key], path=_join(path, key)))
            elif extra is False:
                problems.append(f"{_join(path, key)}: unexpected field")
            elif isinstance(extra, dict):
                problems.extend(check_schema(item, extra, path=_join(path, key)))
    return problems


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


__all__ = ["check_schema"]
