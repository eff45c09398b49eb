//! v1's references to permissions and roles in a request (by id or by name, with a
//! `create` flag), and [`link`], the one helper v1's link operations run through: a key's
//! (`keys.setPermissions`, `keys.addRoles`, ...) and a role's (`permissions.*`).

use crate::error::ApiError;
use crate::openapi::{kinds, require_one_of, schema_mut};
use crate::plumbing::{Authed, Json};
use keygate_domain::Named;
use keygate_rbac::{EntityRef, Principal, RbacError, RbacService};
use keygate_store::SqlStore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A permission by id or name; `slug` is an alias of `name` (and wins when both are given).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct PermissionRef {
    /// A permission id.
    #[schema(min_length = 1, max_length = 255)]
    id: Option<String>,
    /// A permission name; created when missing unless create is false.
    #[schema(schema_with = kinds::permission_name)]
    name: Option<String>,
    /// Alias of name (wins when both are given).
    #[schema(schema_with = kinds::permission_name)]
    slug: Option<String>,
    create: Option<bool>,
}

impl From<PermissionRef> for EntityRef {
    fn from(r: PermissionRef) -> Self {
        let (name, name_field) = match (r.slug, r.name) {
            (Some(slug), _) => (Some(slug), "slug"),
            (None, name) => (name, "name"),
        };
        EntityRef { id: r.id, name, create: r.create, name_field, or_id: false }
    }
}

/// A role by id or name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct RoleRef {
    /// A role id.
    #[schema(min_length = 1, max_length = 255)]
    id: Option<String>,
    /// A role name; created only with create: true.
    #[schema(schema_with = kinds::role_name)]
    name: Option<String>,
    create: Option<bool>,
}

impl From<RoleRef> for EntityRef {
    fn from(r: RoleRef) -> Self {
        EntityRef { id: r.id, name: r.name, create: r.create, name_field: "name", or_id: false }
    }
}

/// A service operation on the links of a key or role: setPermissions, addRoles and the like.
pub(crate) type LinkOp =
    fn(&RbacService<SqlStore>, &Principal, &str, &[EntityRef]) -> Result<Vec<Named>, RbacError>;

/// A request body naming an owner (key or role) and listing references.
pub(crate) trait LinkBody: DeserializeOwned + Send + 'static {
    /// (the owner's id, the references)
    fn into_parts(self) -> (String, Vec<EntityRef>);
}

/// Runs `op` on the owner and references of the call's body.
pub(crate) async fn link<B: LinkBody>(call: Authed<Json<B>>, op: LinkOp) -> Result<Vec<NamedItem>, ApiError> {
    let all = call
        .run(move |kg, principal, Json(body)| {
            let (owner, refs) = body.into_parts();
            op(&kg.rbac, principal, &owner, &refs)
        })
        .await?;
    Ok(all.into_iter().map(NamedItem::from).collect())
}

/// A permission or role as v1's lists show it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Named)]
pub(crate) struct NamedItem {
    id: String,
    name: String,
}

impl From<Named> for NamedItem {
    fn from(n: Named) -> Self {
        Self { id: n.id, name: n.name }
    }
}

/// A [`PermissionRef`] or [`RoleRef`] in a room's document needs an id or a name.
pub(crate) fn references_need_id_or_name(doc: &mut Value, names: &[&str]) {
    for name in names {
        let fields: &[&str] =
            if *name == "PermissionRef" { &["id", "name", "slug"] } else { &["id", "name"] };
        require_one_of(schema_mut(doc, name), fields, false);
    }
}
