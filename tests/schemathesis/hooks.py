"""Schemathesis hooks for keygate's /openapi.json run (tests/schemathesis/run.sh).

JSON Schema cannot tell `1.0` from `1` (both are the integer 1 to a validator), while
keygate's contract refuses `1.0` where an integer is expected (API.md §1: integers must be
JSON integers). Generated bodies therefore spell integral numbers as integers; a
fractional number (1.5) is still generated and must still be refused.
"""
import schemathesis


def _integers(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_integers(v) for v in value]
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    return value


@schemathesis.hook
def map_body(context, body):
    return _integers(body)


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
