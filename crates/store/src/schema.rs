// Kept by hand: only types every backend shares (Text, BigInt, Bool).

diesel::table! {
    workspaces (id) {
        id -> Text,
        name -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    root_keys (id) {
        id -> Text,
        workspace_id -> Text,
        hash -> Text,
        prefix -> Text,
        permissions -> Text,
        created_at -> BigInt,
        expires_at -> Nullable<BigInt>,
        revoked_at -> Nullable<BigInt>,
        name -> Nullable<Text>,
        enabled -> Bool,
        end_chars -> Text,
        last_used_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    apis (workspace_id, id) {
        workspace_id -> Text,
        id -> Text,
        name -> Text,
        created_at -> BigInt,
        key_format -> Text,
        allowed_ips -> Nullable<Text>,
    }
}

diesel::table! {
    keys (id) {
        id -> Text,
        workspace_id -> Text,
        hash -> Text,
        prefix -> Text,
        name -> Nullable<Text>,
        meta -> Nullable<Text>,
        enabled -> Bool,
        expires -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
        api_id -> Nullable<Text>,
        identity_id -> Nullable<Text>,
        credits_remaining -> Nullable<BigInt>,
        refill_interval -> Nullable<Text>,
        refill_amount -> Nullable<BigInt>,
        refill_day -> Nullable<BigInt>,
        last_refill_at -> Nullable<BigInt>,
        key_prefix -> Nullable<Text>,
        byte_length -> Nullable<BigInt>,
        credit_version -> BigInt,
        credit_seq -> BigInt,
        vault_key_id -> Nullable<Text>,
        ciphertext -> Nullable<Text>,
        credits_base -> Nullable<BigInt>,
        allowed_ips -> Nullable<Text>,
    }
}

diesel::table! {
    identities (id) {
        id -> Text,
        workspace_id -> Text,
        external_id -> Text,
        meta -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
        allowed_ips -> Nullable<Text>,
    }
}

diesel::table! {
    ratelimits (id) {
        id -> Text,
        workspace_id -> Text,
        identity_id -> Nullable<Text>,
        key_id -> Nullable<Text>,
        name -> Text,
        max_tokens -> BigInt,
        duration -> BigInt,
        auto_apply -> Bool,
        created_at -> BigInt,
        algorithm -> Text,
    }
}

diesel::table! {
    permissions (id) {
        id -> Text,
        workspace_id -> Text,
        name -> Text,
        description -> Nullable<Text>,
        created_at -> BigInt,
        title -> Nullable<Text>,
    }
}

diesel::table! {
    roles (id) {
        id -> Text,
        workspace_id -> Text,
        name -> Text,
        description -> Nullable<Text>,
        created_at -> BigInt,
        title -> Nullable<Text>,
    }
}

diesel::table! {
    keys_permissions (key_id, permission_id) {
        key_id -> Text,
        permission_id -> Text,
        workspace_id -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    keys_roles (key_id, role_id) {
        key_id -> Text,
        role_id -> Text,
        workspace_id -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    roles_permissions (role_id, permission_id) {
        role_id -> Text,
        permission_id -> Text,
        workspace_id -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    ratelimit_namespaces (id) {
        id -> Text,
        workspace_id -> Text,
        name -> Text,
        created_at -> BigInt,
        algorithm -> Text,
    }
}

diesel::table! {
    audit_events (id) {
        id -> Text,
        workspace_id -> Text,
        actor_id -> Text,
        action -> Text,
        resource_type -> Text,
        resource_id -> Text,
        key_id -> Nullable<Text>,
        created_at -> BigInt,
        role_id -> Nullable<Text>,
        detail -> Nullable<Text>,
    }
}

diesel::table! {
    ratelimit_overrides (id) {
        id -> Text,
        workspace_id -> Text,
        namespace_id -> Text,
        identifier -> Text,
        max_tokens -> BigInt,
        duration -> BigInt,
        is_async -> Bool,
        seq -> BigInt,
        created_at -> BigInt,
    }
}

diesel::joinable!(keys_permissions -> permissions (permission_id));
diesel::joinable!(keys_roles -> roles (role_id));
diesel::joinable!(roles_permissions -> permissions (permission_id));

diesel::table! {
    verification_counts (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags) {
        workspace_id -> Text,
        width -> BigInt,
        bucket -> BigInt,
        api_id -> Text,
        key_id -> Text,
        identity_id -> Text,
        outcome -> Text,
        tags -> Text,
        count -> BigInt,
        spent_credits -> BigInt,
    }
}

diesel::table! {
    ratelimit_counts (workspace_id, namespace_id, width, bucket) {
        workspace_id -> Text,
        namespace_id -> Text,
        width -> BigInt,
        bucket -> BigInt,
        passed -> BigInt,
        denied -> BigInt,
    }
}

diesel::table! {
    ratelimit_identifiers (workspace_id, namespace_id, width, bucket, identifier) {
        workspace_id -> Text,
        namespace_id -> Text,
        width -> BigInt,
        bucket -> BigInt,
        identifier -> Text,
        passed -> BigInt,
        denied -> BigInt,
    }
}

diesel::table! {
    analytics_flushes (id) {
        id -> Text,
        written_at -> BigInt,
    }
}

diesel::table! {
    verification_journal (id) {
        id -> Text,
        merged -> Bool,
        written_at -> BigInt,
        body -> Binary,
    }
}

diesel::table! {
    api_verification_counts (workspace_id, api_id, width, bucket, outcome) {
        workspace_id -> Text,
        api_id -> Text,
        width -> BigInt,
        bucket -> BigInt,
        outcome -> Text,
        count -> BigInt,
        spent_credits -> BigInt,
    }
}

diesel::table! {
    dashboard_sessions (token_hash) {
        token_hash -> Text,
        workspace_id -> Text,
        root_key_id -> Text,
        csrf_token -> Text,
        created_at -> BigInt,
        seen_at -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    apis,
    identities,
    ratelimits,
    workspaces,
    root_keys,
    keys,
    permissions,
    roles,
    keys_permissions,
    keys_roles,
    roles_permissions,
    ratelimit_namespaces,
    audit_events,
);

diesel::table! {
    /// Change counters (see `keygate_rbac::counters`).
    change_counters (scope) {
        scope -> Text,
        value -> BigInt,
        seq -> BigInt,
        changed_at -> BigInt,
    }
}

diesel::table! {
    /// Customer portals (API-v2.md §17).
    portals (id) {
        id -> Text,
        workspace_id -> Text,
        slug -> Text,
        display_name -> Text,
        api_id -> Text,
        enabled -> Bool,
        logo_url -> Nullable<Text>,
        primary_color -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    /// Portal sessions: codes and tokens by their SHA-256 only.
    portal_sessions (id) {
        id -> Text,
        workspace_id -> Text,
        portal_id -> Text,
        external_id -> Text,
        scopes -> Text,
        preview -> Bool,
        return_url -> Nullable<Text>,
        root_key_id -> Text,
        code_hash -> Nullable<Text>,
        code_expires_at -> BigInt,
        token_hash -> Nullable<Text>,
        token_expires_at -> Nullable<BigInt>,
        created_at -> BigInt,
        revoked_at -> Nullable<BigInt>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(portals, portal_sessions);

diesel::table! {
    /// Webhook endpoints (API-v2.md §23).
    webhook_endpoints (id) {
        id -> Text,
        workspace_id -> Text,
        url -> Text,
        events -> Text,
        description -> Nullable<Text>,
        enabled -> Bool,
        credits_low -> Text,
        expiring_days -> Text,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_until -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    /// The webhook outbox: events and the body their deliveries send.
    webhook_events (id) {
        id -> Text,
        workspace_id -> Text,
        event_type -> Text,
        body -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    /// A delivery of an event to an endpoint, claimed with a lease.
    webhook_deliveries (id) {
        id -> Text,
        workspace_id -> Text,
        endpoint_id -> Text,
        event_id -> Text,
        event_type -> Text,
        status -> Text,
        attempts -> BigInt,
        next_attempt_at -> Nullable<BigInt>,
        lease_owner -> Nullable<Text>,
        lease_until -> Nullable<BigInt>,
        last_status -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    /// Each attempt of a delivery.
    webhook_attempts (delivery_id, attempt) {
        delivery_id -> Text,
        attempt -> BigInt,
        at -> BigInt,
        status -> Nullable<BigInt>,
        error -> Nullable<Text>,
        response -> Nullable<Text>,
        duration_ms -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    webhook_endpoints,
    webhook_events,
    webhook_deliveries,
    webhook_attempts
);

diesel::allow_tables_to_appear_in_same_query!(keys, webhook_endpoints);

diesel::table! {
    /// Expiry events announced: one per (key, endpoint, days before, expiry).
    webhook_expiry_notices (key_id, endpoint_id, days, expires) {
        key_id -> Text,
        endpoint_id -> Text,
        days -> BigInt,
        expires -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(keys, webhook_expiry_notices);

diesel::table! {
    /// The first report of each key found leaked by GitHub's secret scanning.
    leaked_keys (key_id) {
        key_id -> Text,
        workspace_id -> Text,
        url -> Text,
        source -> Text,
        action -> Text,
        reported_at -> BigInt,
    }
}

diesel::table! {
    /// Keys from other systems waiting for their first use: lookup part and old hash.
    legacy_keys (key_id) {
        key_id -> Text,
        workspace_id -> Text,
        lookup -> Text,
        hash -> Text,
    }
}

diesel::allow_tables_to_appear_in_same_query!(keys, legacy_keys);

diesel::table! {
    /// How far each usage export sink's periods were written out (keygate-metering).
    usage_export_marks (sink) {
        sink -> Text,
        exported_until -> BigInt,
        updated_at -> BigInt,
    }
}
