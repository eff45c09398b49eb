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


def _repeated_limit_names(limits):
    """API-v2.md §11: one rate-limit name twice in `ratelimits` is a 400 (JSON Schema's
    `uniqueItems` compares whole objects, not one field), so such bodies are not generated."""
    if not isinstance(limits, list):
        return False
    names = [l.get("name") for l in limits if isinstance(l, dict) and isinstance(l.get("name"), str)]
    return len(names) != len(set(names))


@schemathesis.hook
def filter_body(context, body):
    if not isinstance(body, dict):
        return True
    return not (
        _conflicting_create_flags(body.get("permissions"))
        or _conflicting_create_flags(body.get("roles"))
        or _repeated_limit_names(body.get("ratelimits"))
    )


@schemathesis.hook
def before_call(context, case, **kwargs):
    """The examples and coverage phases build bodies without `filter_body`: there, a rate
    limit's name that repeats an earlier one is made distinct (`<name>~<i>`, within the
    128 characters a name may have), which keeps every other property of the case."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("ratelimits"), list):
        return
    seen = set()
    for i, limit in enumerate(body["ratelimits"]):
        if not isinstance(limit, dict) or not isinstance(limit.get("name"), str):
            continue
        name = limit["name"]
        if name in seen:
            suffix = f"~{i}"
            limit["name"] = name[: max(1, 128 - len(suffix))] + suffix
        seen.add(limit["name"])
