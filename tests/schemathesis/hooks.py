"""Schemathesis hooks for keygate's OpenAPI runs (tests/schemathesis/run.sh).

Integral numbers written as floats (`6721.0`) are integers, as JSON Schema says, and keygate
accepts them (API.md §1): generated bodies go out as schemathesis makes them.
"""
import schemathesis


def _conflicting_create_flags(entries):
    """The contract's one cross-entry rule (API.md §3.2): one name listed with different
    `create` flags is a 400. JSON Schema cannot say it, so such bodies are not generated."""
    if not isinstance(entries, list):
        return False
    seen = {}
    for e in entries:
        if not isinstance(e, dict):
            continue
        name = e.get("slug") if isinstance(e.get("slug"), str) else e.get("name")
        if not isinstance(name, str) or isinstance(e.get("id"), str):
            continue
        create = e.get("create")
        if name in seen and seen[name] != create:
            return True
        seen[name] = create
    return False


@schemathesis.hook
def filter_body(context, body):
    if not isinstance(body, dict):
        return True
    return not (_conflicting_create_flags(body.get("permissions")) or _conflicting_create_flags(body.get("roles")))
