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


def _values(v):
    """A parameter's values: a list, or one value (commas separating several, as v1 takes
    `groupBy`)."""
    if isinstance(v, list):
        return [str(x) for x in v]
    return str(v).split(",") if v is not None else []


def _analytics_conflicts(fields):
    """The analytics queries' cross-field rules (docs/api.md): `groupBy` takes `tag` or
    `tags`, not both, and `start` must be before `end`."""
    groups = _values(fields.get("groupBy"))
    if "tag" in groups and "tags" in groups:
        return True
    start, end = fields.get("start"), fields.get("end")
    try:
        return start is not None and end is not None and int(float(start)) >= int(float(end))
    except (TypeError, ValueError):
        return False


@schemathesis.hook
def filter_body(context, body):
    if not isinstance(body, dict):
        return True
    return not (
        _conflicting_create_flags(body.get("permissions"))
        or _conflicting_create_flags(body.get("roles"))
        or _repeated_limit_names(body.get("ratelimits"))
        or _analytics_conflicts(body)
    )


@schemathesis.hook
def filter_query(context, query):
    """v1's `keys.getVerifications` takes `keyId` or `ownerId`, exactly one of them; the
    analytics rules as for bodies."""
    if not isinstance(query, dict):
        return True
    if context.operation.path == "/v1/keys.getVerifications" and (("keyId" in query) == ("ownerId" in query)):
        return False
    return not _analytics_conflicts(query)


def _fix_analytics(fields, path):
    """The analytics rules on a case the filters did not see: `tag` dropped when `tags` is
    grouped by too, `end` moved after `start`, and v1's `keys.getVerifications` given
    exactly one of `keyId` and `ownerId`."""
    if not isinstance(fields, dict):
        return
    groups = fields.get("groupBy")
    if "tag" in _values(groups) and "tags" in _values(groups):
        kept = [g for g in _values(groups) if g != "tag"]
        fields["groupBy"] = kept if isinstance(groups, list) else ",".join(kept)
    start, end = fields.get("start"), fields.get("end")
    try:
        if start is not None and end is not None and int(float(start)) >= int(float(end)):
            fields["end"] = int(float(start)) + 1
    except (TypeError, ValueError):
        pass
    if path == "/v1/keys.getVerifications":
        if "keyId" in fields and "ownerId" in fields:
            del fields["ownerId"]
        elif "keyId" not in fields and "ownerId" not in fields:
            fields["ownerId"] = "nobody"


@schemathesis.hook
def before_call(context, case, **kwargs):
    """The examples and coverage phases build bodies without `filter_body`: there, a rate
    limit's name that repeats an earlier one is made distinct (`<name>~<i>`, within the
    128 characters a name may have), which keeps every other property of the case; the
    analytics rules are applied likewise (`_fix_analytics`)."""
    path = case.operation.path
    if path in ("/v1/analytics.getVerifications", "/v1/keys.getVerifications"):
        _fix_analytics(case.query, path)
    elif path in ("/v2/keygate.getVerifications", "/v2/keygate.getRatelimits"):
        _fix_analytics(case.body, path)
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
