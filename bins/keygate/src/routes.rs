//! The route table: every path, its methods and its handler, in one place.

use crate::handlers::{keys, overrides, permissions, ratelimit, system};
use actix_web::http::Method;
use actix_web::{HttpRequest, Resource, web};

/// (path, methods, handler name) for docs and tests.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/v1/ratelimits.limit", &["POST"]),
    ("/v1/ratelimits.setOverride", &["POST"]),
    ("/v1/ratelimits.getOverride", &["GET"]),
    ("/v1/ratelimits.listOverrides", &["GET"]),
    ("/v1/ratelimits.deleteOverride", &["POST"]),
    ("/v1/keys.setPermissions", &["POST"]),
    ("/v1/keys.addRoles", &["POST"]),
    ("/v1/keys.getKey", &["GET", "POST"]),
    ("/v1/keys.createKey", &["POST"]),
    ("/v1/keys.deleteKey", &["POST"]),
    ("/v1/keys.verifyKey", &["POST"]),
    ("/v1/keys.addPermissions", &["POST"]),
    ("/v1/keys.removePermissions", &["POST"]),
    ("/v1/keys.setRoles", &["POST"]),
    ("/v1/keys.removeRoles", &["POST"]),
    ("/v1/permissions.createPermission", &["POST"]),
    ("/v1/permissions.getPermission", &["GET"]),
    ("/v1/permissions.listPermissions", &["GET"]),
    ("/v1/permissions.deletePermission", &["POST"]),
    ("/v1/permissions.createRole", &["POST"]),
    ("/v1/permissions.getRole", &["GET"]),
    ("/v1/permissions.listRoles", &["GET"]),
    ("/v1/permissions.deleteRole", &["POST"]),
    ("/v1/permissions.addPermissionsToRole", &["POST"]),
    ("/v1/permissions.setRolePermissions", &["POST"]),
    ("/v1/permissions.removePermissionsFromRole", &["POST"]),
    ("/v1/liveness", &["GET"]),
    ("/docs/errors", &["GET"]),
    ("/openapi.json", &["GET"]),
];

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
    let mut r = web::resource(path);
    let served = served_methods(methods);
    for m in &served {
        let method = Method::from_bytes(m.as_bytes()).unwrap_or(Method::POST);
        r = r.route(web::method(method).to(handler.clone()));
    }
    let allow = served.join(", ");
    r.default_service(web::to(move |req: HttpRequest| {
        let allow = allow.clone();
        async move { Err::<actix_web::HttpResponse, _>(system::method_not_allowed(&req, &allow)) }
    }))
}

fn methods_of(path: &str) -> &'static [&'static str] {
    ROUTES.iter().find(|(p, _)| *p == path).map(|(_, m)| *m).unwrap_or(&["POST"])
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    const SET_PERMISSIONS: &str = "/v1/keys.setPermissions";
    const ADD_ROLES: &str = "/v1/keys.addRoles";
    const GET_KEY: &str = "/v1/keys.getKey";
    const CREATE_KEY: &str = "/v1/keys.createKey";
    const DELETE_KEY: &str = "/v1/keys.deleteKey";
    const VERIFY_KEY: &str = "/v1/keys.verifyKey";
    const ADD_PERMISSIONS: &str = "/v1/keys.addPermissions";
    const REMOVE_PERMISSIONS: &str = "/v1/keys.removePermissions";
    const SET_ROLES: &str = "/v1/keys.setRoles";
    const REMOVE_ROLES: &str = "/v1/keys.removeRoles";
    const CREATE_PERMISSION: &str = "/v1/permissions.createPermission";
    const GET_PERMISSION: &str = "/v1/permissions.getPermission";
    const LIST_PERMISSIONS: &str = "/v1/permissions.listPermissions";
    const DELETE_PERMISSION: &str = "/v1/permissions.deletePermission";
    const CREATE_ROLE: &str = "/v1/permissions.createRole";
    const GET_ROLE: &str = "/v1/permissions.getRole";
    const LIST_ROLES: &str = "/v1/permissions.listRoles";
    const DELETE_ROLE: &str = "/v1/permissions.deleteRole";
    const ADD_TO_ROLE: &str = "/v1/permissions.addPermissionsToRole";
    const SET_OF_ROLE: &str = "/v1/permissions.setRolePermissions";
    const REMOVE_FROM_ROLE: &str = "/v1/permissions.removePermissionsFromRole";
    const LIMIT: &str = "/v1/ratelimits.limit";
    const SET_OVERRIDE: &str = "/v1/ratelimits.setOverride";
    const GET_OVERRIDE: &str = "/v1/ratelimits.getOverride";
    const LIST_OVERRIDES: &str = "/v1/ratelimits.listOverrides";
    const DELETE_OVERRIDE: &str = "/v1/ratelimits.deleteOverride";
    const LIVENESS: &str = "/v1/liveness";
    const ERROR_DOCS: &str = "/docs/errors";
    const OPENAPI: &str = "/openapi.json";
    // The hot path first: actix tries resources in registration order.
    cfg.service(resource(LIMIT, methods_of(LIMIT), ratelimit::limit))
        .service(resource(SET_PERMISSIONS, methods_of(SET_PERMISSIONS), keys::set_permissions))
        .service(resource(ADD_ROLES, methods_of(ADD_ROLES), keys::add_roles))
        .service(resource(GET_KEY, methods_of(GET_KEY), keys::get_key))
        .service(resource(CREATE_KEY, methods_of(CREATE_KEY), keys::create_key))
        .service(resource(DELETE_KEY, methods_of(DELETE_KEY), keys::delete_key))
        .service(resource(VERIFY_KEY, methods_of(VERIFY_KEY), keys::verify_key))
        .service(resource(ADD_PERMISSIONS, methods_of(ADD_PERMISSIONS), keys::add_permissions))
        .service(resource(REMOVE_PERMISSIONS, methods_of(REMOVE_PERMISSIONS), keys::remove_permissions))
        .service(resource(SET_ROLES, methods_of(SET_ROLES), keys::set_roles))
        .service(resource(REMOVE_ROLES, methods_of(REMOVE_ROLES), keys::remove_roles))
        .service(resource(CREATE_PERMISSION, methods_of(CREATE_PERMISSION), permissions::create_permission))
        .service(resource(GET_PERMISSION, methods_of(GET_PERMISSION), permissions::get_permission))
        .service(resource(LIST_PERMISSIONS, methods_of(LIST_PERMISSIONS), permissions::list_permissions))
        .service(resource(DELETE_PERMISSION, methods_of(DELETE_PERMISSION), permissions::delete_permission))
        .service(resource(CREATE_ROLE, methods_of(CREATE_ROLE), permissions::create_role))
        .service(resource(GET_ROLE, methods_of(GET_ROLE), permissions::get_role))
        .service(resource(LIST_ROLES, methods_of(LIST_ROLES), permissions::list_roles))
        .service(resource(DELETE_ROLE, methods_of(DELETE_ROLE), permissions::delete_role))
        .service(resource(ADD_TO_ROLE, methods_of(ADD_TO_ROLE), permissions::add_permissions_to_role))
        .service(resource(SET_OF_ROLE, methods_of(SET_OF_ROLE), permissions::set_role_permissions))
        .service(resource(
            REMOVE_FROM_ROLE,
            methods_of(REMOVE_FROM_ROLE),
            permissions::remove_permissions_from_role,
        ))
        .service(resource(SET_OVERRIDE, methods_of(SET_OVERRIDE), overrides::set_override))
        .service(resource(GET_OVERRIDE, methods_of(GET_OVERRIDE), overrides::get_override))
        .service(resource(LIST_OVERRIDES, methods_of(LIST_OVERRIDES), overrides::list_overrides))
        .service(resource(DELETE_OVERRIDE, methods_of(DELETE_OVERRIDE), overrides::delete_override))
        .service(resource(LIVENESS, methods_of(LIVENESS), system::liveness))
        .service(resource(ERROR_DOCS, methods_of(ERROR_DOCS), system::error_docs))
        .service(resource(OPENAPI, methods_of(OPENAPI), system::openapi))
        .default_service(web::to(system::not_found));
}
