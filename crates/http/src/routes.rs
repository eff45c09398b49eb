//! The route table: every path, its methods and its handler, in one place.

use crate::handlers::{
    analytics, apis, audit, gateway, keys, overrides, permissions, ratelimit, scanning, system, v2,
};
use crate::metrics::RouteName;
use crate::plumbing::RequestId;
use actix_web::http::Method;
use actix_web::{HttpRequest, Resource, web};

/// The route table, written once: each path, its methods and its handler, in
/// registration order (actix tries resources in that order: the hot paths first). It
/// makes [`ROUTES`] (what the docs and tests read) and [`configure`] (what the server
/// serves), so the two cannot differ.
macro_rules! route_table {
    ($( $path:literal [$($method:literal),+] => $handler:path ),* $(,)?) => {
        /// (path, methods) of every route, in registration order.
        pub const ROUTES: &[(&str, &[&str])] = &[ $( ($path, &[$($method),+]) ),* ];

        /// Registers every route, each wrapped in `middleware` (the request id, the error
        /// body, metrics and the trace span: [`RequestId`]).
        pub fn configure(cfg: &mut web::ServiceConfig, middleware: RequestId) {
            $( cfg.service(resource($path, &[$($method),+], $handler).wrap(middleware)); )*
        }
    };
}

route_table! {
    "/v1/ratelimits.limit" ["POST"] => ratelimit::limit,
    "/v1/keys.verifyKey" ["POST"] => keys::verify::verify_key,
    "/v2/ratelimit.limit" ["POST"] => v2::ratelimit::limit,
    "/v2/keys.verifyKey" ["POST"] => keys::verify::verify_key_v2,
    "/v1/gateway.authorize" ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] => gateway::authorize,
    "/v1/gateway.authorize/{original:.*}" ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] => gateway::authorize,
    "/v1/ratelimits.setOverride" ["POST"] => overrides::set_override,
    "/v1/ratelimits.getOverride" ["GET"] => overrides::get_override,
    "/v1/ratelimits.listOverrides" ["GET"] => overrides::list_overrides,
    "/v1/ratelimits.deleteOverride" ["POST"] => overrides::delete_override,
    "/v1/keys.setPermissions" ["POST"] => keys::links::set_permissions,
    "/v1/keys.addRoles" ["POST"] => keys::links::add_roles,
    "/v1/keys.getKey" ["GET", "POST"] => keys::read::get_key,
    "/v1/keys.createKey" ["POST"] => keys::create::create_key,
    "/v1/keys.deleteKey" ["POST"] => keys::update::delete_key,
    "/v1/keys.addPermissions" ["POST"] => keys::links::add_permissions,
    "/v1/keys.removePermissions" ["POST"] => keys::links::remove_permissions,
    "/v1/keys.setRoles" ["POST"] => keys::links::set_roles,
    "/v1/keys.removeRoles" ["POST"] => keys::links::remove_roles,
    "/v1/permissions.createPermission" ["POST"] => permissions::create_permission,
    "/v1/permissions.getPermission" ["GET"] => permissions::get_permission,
    "/v1/permissions.listPermissions" ["GET"] => permissions::list_permissions,
    "/v1/permissions.deletePermission" ["POST"] => permissions::delete_permission,
    "/v1/permissions.createRole" ["POST"] => permissions::create_role,
    "/v1/permissions.getRole" ["GET"] => permissions::get_role,
    "/v1/permissions.listRoles" ["GET"] => permissions::list_roles,
    "/v1/permissions.deleteRole" ["POST"] => permissions::delete_role,
    "/v1/permissions.addPermissionsToRole" ["POST"] => permissions::add_permissions_to_role,
    "/v1/permissions.setRolePermissions" ["POST"] => permissions::set_role_permissions,
    "/v1/permissions.removePermissionsFromRole" ["POST"] => permissions::remove_permissions_from_role,
    "/v1/audit.listEvents" ["GET"] => audit::list_events,
    "/v1/apis.createApi" ["POST"] => apis::create_api,
    "/v1/apis.getApi" ["GET"] => apis::get_api,
    "/v1/apis.listKeys" ["GET"] => apis::list_keys,
    "/v1/apis.deleteApi" ["POST"] => apis::delete_api,
    "/v1/analytics.getVerifications" ["GET"] => analytics::get_verifications,
    "/v1/keys.getVerifications" ["GET"] => analytics::key_verifications,
    "/v1/secret-scanning/github" ["POST"] => scanning::github,
    "/v1/liveness" ["GET"] => system::liveness,
    "/v1/readiness" ["GET"] => system::readiness,
    "/v2/ratelimit.multiLimit" ["POST"] => v2::ratelimit::multi_limit,
    "/v2/ratelimit.setOverride" ["POST"] => v2::overrides::set_override,
    "/v2/ratelimit.getOverride" ["POST"] => v2::overrides::get_override,
    "/v2/ratelimit.listOverrides" ["POST"] => v2::overrides::list_overrides,
    "/v2/ratelimit.deleteOverride" ["POST"] => v2::overrides::delete_override,
    "/v2/ratelimit.getNamespace" ["POST"] => v2::namespaces::get_namespace,
    "/v2/ratelimit.listNamespaces" ["POST"] => v2::namespaces::list_namespaces,
    "/v2/ratelimit.updateNamespace" ["POST"] => v2::namespaces::update_namespace,
    "/v2/apis.createApi" ["POST"] => v2::apis::create_api,
    "/v2/apis.getApi" ["POST"] => v2::apis::get_api,
    "/v2/apis.listKeys" ["POST"] => v2::apis::list_keys,
    "/v2/apis.deleteApi" ["POST"] => v2::apis::delete_api,
    "/v2/identities.createIdentity" ["POST"] => v2::identities::create_identity,
    "/v2/identities.getIdentity" ["POST"] => v2::identities::get_identity,
    "/v2/identities.listIdentities" ["POST"] => v2::identities::list_identities,
    "/v2/identities.updateIdentity" ["POST"] => v2::identities::update_identity,
    "/v2/identities.deleteIdentity" ["POST"] => v2::identities::delete_identity,
    "/v2/keys.createKey" ["POST"] => keys::create::create_key_v2,
    "/v2/keys.migrateKeys" ["POST"] => keys::import::migrate_keys,
    "/v2/keys.updateCredits" ["POST"] => v2::credits::update_credits,
    "/v2/keys.updateKey" ["POST"] => keys::update::update_key,
    "/v2/keys.rerollKey" ["POST"] => keys::create::reroll_key,
    "/v2/keys.getKey" ["POST"] => keys::read::get_key_v2,
    "/v2/keys.whoami" ["POST"] => keys::read::whoami,
    "/v2/keys.deleteKey" ["POST"] => keys::update::delete_key_v2,
    "/v2/keys.setPermissions" ["POST"] => keys::links::set_permissions_v2,
    "/v2/keys.addPermissions" ["POST"] => keys::links::add_permissions_v2,
    "/v2/keys.removePermissions" ["POST"] => keys::links::remove_permissions_v2,
    "/v2/keys.setRoles" ["POST"] => keys::links::set_roles_v2,
    "/v2/keys.addRoles" ["POST"] => keys::links::add_roles_v2,
    "/v2/keys.removeRoles" ["POST"] => keys::links::remove_roles_v2,
    "/v2/permissions.createPermission" ["POST"] => v2::permissions::create_permission,
    "/v2/permissions.getPermission" ["POST"] => v2::permissions::get_permission,
    "/v2/permissions.listPermissions" ["POST"] => v2::permissions::list_permissions,
    "/v2/permissions.deletePermission" ["POST"] => v2::permissions::delete_permission,
    "/v2/permissions.createRole" ["POST"] => v2::permissions::create_role,
    "/v2/permissions.getRole" ["POST"] => v2::permissions::get_role,
    "/v2/permissions.listRoles" ["POST"] => v2::permissions::list_roles,
    "/v2/permissions.deleteRole" ["POST"] => v2::permissions::delete_role,
    "/v2/permissions.setRolePermissions" ["POST"] => v2::permissions::set_role_permissions,
    "/v2/rootKeys.createKey" ["POST"] => v2::root_keys::create_key,
    "/v2/rootKeys.listKeys" ["POST"] => v2::root_keys::list_keys,
    "/v2/rootKeys.updateKey" ["POST"] => v2::root_keys::update_key,
    "/v2/rootKeys.rerollKey" ["POST"] => v2::root_keys::reroll_key,
    "/v2/rootKeys.deleteKey" ["POST"] => v2::root_keys::delete_key,
    "/v2/portal.createPortal" ["POST"] => v2::portal::create_portal,
    "/v2/portal.getPortal" ["POST"] => v2::portal::get_portal,
    "/v2/portal.updatePortal" ["POST"] => v2::portal::update_portal,
    "/v2/portal.deletePortal" ["POST"] => v2::portal::delete_portal,
    "/v2/portal.createSession" ["POST"] => v2::portal::create_session,
    "/v2/portal.exchangeCode" ["POST"] => v2::portal::exchange_code,
    "/v2/portal.listSessions" ["POST"] => v2::portal::list_sessions,
    "/v2/portal.revokeSession" ["POST"] => v2::portal::revoke_session,
    "/v2/portal.listKeys" ["POST"] => v2::portal::list_keys,
    "/v2/portal.rerollKey" ["POST"] => v2::portal::reroll_key,
    "/v2/portal.getVerifications" ["POST"] => v2::portal::get_verifications,
    "/v2/webhooks.createEndpoint" ["POST"] => v2::webhooks::create_endpoint,
    "/v2/webhooks.getEndpoint" ["POST"] => v2::webhooks::get_endpoint,
    "/v2/webhooks.listEndpoints" ["POST"] => v2::webhooks::list_endpoints,
    "/v2/webhooks.updateEndpoint" ["POST"] => v2::webhooks::update_endpoint,
    "/v2/webhooks.deleteEndpoint" ["POST"] => v2::webhooks::delete_endpoint,
    "/v2/webhooks.rotateSecret" ["POST"] => v2::webhooks::rotate_secret,
    "/v2/webhooks.listDeliveries" ["POST"] => v2::webhooks::list_deliveries,
    "/v2/webhooks.replayDelivery" ["POST"] => v2::webhooks::replay_delivery,
    "/v2/keygate.getVerifications" ["POST"] => v2::analytics::get_verifications,
    "/v2/keygate.getRatelimits" ["POST"] => v2::ratelimit_analytics::get_ratelimits,
    "/v2/analytics.getVerifications" ["POST"] => v2::sql::get_verifications,
    "/v2/analytics.getRatelimits" ["POST"] => v2::sql::get_ratelimits,
    "/v2/liveness" ["GET"] => v2::liveness,
    "/docs/errors" ["GET"] => system::error_docs,
    "/openapi.json" ["GET"] => system::openapi,
    "/openapi-v2.json" ["GET"] => system::openapi_v2,
    "/metrics" ["GET"] => system::metrics,
}

/// The API's JSON 404 as the `App`'s default service (for any path no route serves),
/// wrapped in `middleware` as the routes are.
pub fn not_found(cfg: &mut web::ServiceConfig, middleware: RequestId) {
    cfg.default_service(actix_service::apply(middleware, web::to(system::not_found)));
}

/// The methods a path answers: its [`ROUTES`] methods, and `HEAD` wherever there is `GET`
/// (the same response without its body, as HTTP expects; health checks use it).
pub fn served_methods(methods: &[&'static str]) -> Vec<&'static str> {
    let mut served = Vec::with_capacity(methods.len() + 1);
    for &m in methods {
        served.push(m);
        if m == "GET" {
            served.push("HEAD");
        }
    }
    served
}

/// A resource answering `methods` (and `HEAD` with `GET`) with `handler`, and 405 (with
/// `Allow`) otherwise.
fn resource<F, Args>(path: &'static str, methods: &'static [&'static str], handler: F) -> Resource
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    // The route's template, for metrics and the access log (`RouteName`).
    let mut r = web::resource(path).app_data(RouteName(path));
    let served = served_methods(methods);
    for m in &served {
        // The table's literals are valid methods (the test below parses every one).
        let Ok(method) = Method::from_bytes(m.as_bytes()) else { continue };
        r = r.route(web::method(method).to(handler.clone()));
    }
    let allow = served.join(", ");
    r.default_service(web::to(move |req: HttpRequest| {
        let allow = allow.clone();
        async move { Err::<actix_web::HttpResponse, _>(system::method_not_allowed(&req, &allow)) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_valid_methods_and_one_entry() {
        let mut paths = std::collections::HashSet::new();
        for (path, methods) in ROUTES {
            assert!(paths.insert(*path), "{path} is listed twice");
            assert!(!methods.is_empty(), "{path} has no method");
            for m in *methods {
                assert!(Method::from_bytes(m.as_bytes()).is_ok(), "{path}: {m}");
            }
        }
        assert_eq!(ROUTES[0].0, "/v1/ratelimits.limit", "the hot path is tried first");
    }
}
