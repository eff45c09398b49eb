//! `portal.createPortal|getPortal|updatePortal|deletePortal`: one portal per API, found by
//! id or slug; without the permission a portal is 404, as if it did not exist.

use crate::model::{check_change, check_new};
use crate::{NewPortal, Portal, PortalChange, PortalService, PortalStore, PortalTx};
use keygate_domain::{IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, new_id};
use keygate_rbac::{AuditEvent, Principal, RbacError, Resource};

/// Which portal a request names.
#[derive(Debug, Clone, Copy)]
pub enum PortalRef<'a> {
    /// Its id (`portal_…`) or slug.
    Portal(&'a str),
    /// Its API (`keyspaceId`).
    Api(&'a str),
}

/// Whether `p` holds `portal.*.<action>` or `portal.<portalId>.<action>`.
pub(crate) fn may(p: &Principal, portal_id: &str, action: &str) -> bool {
    p.holds(&format!("portal.*.{action}")) || p.holds(&format!("portal.{portal_id}.{action}"))
}

pub(crate) fn not_found(what: &str) -> RbacError {
    RbacError::not_found(Resource::Portal, what)
}

/// An audit event of `p` about a portal.
pub(crate) fn event(p: &Principal, action: &'static str, portal_id: &str, at: i64) -> AuditEvent {
    AuditEvent {
        workspace_id: p.workspace_id.clone(),
        actor_id: p.root_key_id.clone(),
        action,
        resource_type: "portal",
        resource_id: portal_id.to_string(),
        key_id: None,
        role_id: None,
        at,
        detail: None,
    }
}

impl<S: PortalStore> PortalService<S> {
    /// The portal `r` names that `p` may `action` (`read_portal`, …): 404 when there is
    /// none in the workspace or `p` may not.
    pub(crate) fn find(
        &self,
        tx: &mut dyn PortalTx,
        p: &Principal,
        r: PortalRef<'_>,
        action: &str,
    ) -> Result<Portal, RbacError> {
        let ws = p.workspace_id.as_str();
        let (found, what) = match r {
            PortalRef::Portal(id) => {
                check_len("portal", id, MAX_NAME_CHARS)?;
                (tx.portal(ws, id)?, id)
            }
            PortalRef::Api(api) => {
                check_len("keyspaceId", api, MAX_NAME_CHARS)?;
                (tx.portal_of_api(ws, api)?, api)
            }
        };
        found.filter(|portal| may(p, &portal.id, action)).ok_or_else(|| not_found(what))
    }

    /// `portal.createPortal`: needs `portal.*.create_portal` (404 without it, as for the
    /// other portal operations); the API must exist (404); slug and API each hold one
    /// portal (409).
    pub fn create_portal(&self, p: &Principal, new: NewPortal) -> Result<Portal, RbacError> {
        check_new(&new)?;
        if !p.holds("portal.*.create_portal") {
            return Err(RbacError::NotFound(
                Resource::Portal,
                "portals are not reachable with this root key (it lacks portal.*.create_portal)".into(),
            ));
        }
        let now = self.now();
        let portal = Portal {
            id: new_id(IdPrefix::Portal),
            workspace_id: p.workspace_id.clone(),
            slug: new.slug,
            display_name: new.display_name,
            api_id: new.api_id,
            enabled: new.enabled.unwrap_or(true),
            logo_url: new.logo_url,
            primary_color: new.primary_color,
            created_at: now,
            updated_at: None,
        };
        self.rbac.store().portal_transaction(|tx| {
            self.check_unique(tx, &portal, None)?;
            tx.insert_portal(&portal)?;
            tx.insert_audit_events(&[event(p, "portal.create", &portal.id, now)])?;
            Ok(())
        })?;
        Ok(portal)
    }

    /// The API exists, and no other portal has the slug or the API (409).
    fn check_unique(
        &self,
        tx: &mut dyn PortalTx,
        portal: &Portal,
        was: Option<&Portal>,
    ) -> Result<(), RbacError> {
        let ws = portal.workspace_id.as_str();
        if was.is_none_or(|w| w.api_id != portal.api_id) {
            if tx.get_api(ws, &portal.api_id)?.is_none() {
                return Err(RbacError::not_found(Resource::Api, &portal.api_id));
            }
            if tx.portal_of_api(ws, &portal.api_id)?.is_some() {
                return Err(RbacError::Conflict(
                    Resource::Portal,
                    format!("API {} has a portal already (one portal per API)", portal.api_id),
                ));
            }
        }
        if was.is_none_or(|w| w.slug != portal.slug) && tx.portal_by_slug(&portal.slug)?.is_some() {
            return Err(RbacError::Conflict(Resource::Portal, format!("the slug {} is taken", portal.slug)));
        }
        Ok(())
    }

    /// The workspace's portals `p` may read, by slug (the dashboard).
    pub fn list_portals(&self, p: &Principal) -> Result<Vec<Portal>, RbacError> {
        let all = self.rbac.store().portal_read(|tx| Ok(tx.workspace_portals(&p.workspace_id)?))?;
        Ok(all.into_iter().filter(|portal| may(p, &portal.id, "read_portal")).collect())
    }

    /// `portal.getPortal`: needs `read_portal`.
    pub fn get_portal(&self, p: &Principal, r: PortalRef<'_>) -> Result<Portal, RbacError> {
        self.rbac.store().portal_read(|tx| self.find(tx, p, r, "read_portal"))
    }

    /// `portal.updatePortal`: needs `update_portal`. Disabling it ends its sessions' use
    /// (they answer 401 while it is disabled).
    pub fn update_portal(
        &self,
        p: &Principal,
        portal: &str,
        change: PortalChange,
    ) -> Result<Portal, RbacError> {
        check_change(&change)?;
        let now = self.now();
        self.rbac.store().portal_transaction(|tx| {
            let was = self.find(tx, p, PortalRef::Portal(portal), "update_portal")?;
            let mut next = was.clone();
            if let Some(s) = change.slug {
                next.slug = s;
            }
            if let Some(n) = change.display_name {
                next.display_name = n;
            }
            if let Some(a) = change.api_id {
                next.api_id = a;
            }
            if let Some(e) = change.enabled {
                next.enabled = e;
            }
            if let Some(l) = change.logo_url {
                next.logo_url = l;
            }
            if let Some(c) = change.primary_color {
                next.primary_color = c;
            }
            next.updated_at = Some(now);
            self.check_unique(tx, &next, Some(&was))?;
            tx.update_portal(&next)?;
            tx.insert_audit_events(&[event(p, "portal.update", &next.id, now)])?;
            Ok(next)
        })
    }

    /// `portal.deletePortal`: needs `delete_portal`; its sessions go with it.
    pub fn delete_portal(&self, p: &Principal, portal: &str) -> Result<(), RbacError> {
        let now = self.now();
        self.rbac.store().portal_transaction(|tx| {
            let found = self.find(tx, p, PortalRef::Portal(portal), "delete_portal")?;
            tx.delete_portal(&p.workspace_id, &found.id)?;
            tx.insert_audit_events(&[event(p, "portal.delete", &found.id, now)])?;
            Ok(())
        })
    }

    /// The portal of a slug, for its pages (any workspace); `None` when there is none or
    /// the slug cannot be one.
    pub fn portal_by_slug(&self, slug: &str) -> Result<Option<Portal>, RbacError> {
        if crate::model::validate_slug("slug", slug).is_err() {
            return Ok(None);
        }
        self.rbac.store().portal_read(|tx| Ok(tx.portal_by_slug(slug)?))
    }
}

/// `getPortal` names exactly one of `portal` and `keyspaceId`.
pub fn one_ref<'a>(portal: Option<&'a str>, api: Option<&'a str>) -> Result<PortalRef<'a>, ValidationError> {
    match (portal, api) {
        (Some(p), None) => Ok(PortalRef::Portal(p)),
        (None, Some(a)) => Ok(PortalRef::Api(a)),
        _ => Err(ValidationError::new("portal", "give exactly one of portal and keyspaceId")),
    }
}
