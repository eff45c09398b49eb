//! The customer portal's pages (docs/portal.md): an end user's keys, their charts, a
//! rolled key shown once, and the messages (link expired, session ended, not found).

use crate::BarChart;
use askama::Template;

/// What every portal page's frame shows: the portal's name, logo and colour, and the
/// link back to the team's app.
#[derive(Debug, Clone)]
pub struct PortalFrame {
    pub slug: String,
    pub display_name: String,
    /// An https URL (its origin is the only other one the page's CSP allows, for images).
    pub logo_url: Option<String>,
    /// Whether the portal has a colour (`/portal/<slug>/theme.css`).
    pub themed: bool,
    pub return_url: Option<String>,
}

/// One of the user's keys.
#[derive(Debug, Clone)]
pub struct PortalKey {
    pub id: String,
    /// Its name, or where it starts.
    pub title: String,
    pub start: String,
    pub created: String,
    pub last_used: String,
    pub credits: String,
    pub expires: String,
    pub enabled: bool,
    pub chart: Option<BarChart>,
}

/// The user's keys, each with its chart and a form to roll it.
#[derive(Debug, Template)]
#[template(path = "portal_keys.html")]
pub struct PortalKeysPage {
    pub frame: PortalFrame,
    pub csrf: String,
    pub preview: bool,
    pub can_read: bool,
    pub can_reroll: bool,
    /// All the user's verifications (when the session may read them).
    pub total: Option<BarChart>,
    pub keys: Vec<PortalKey>,
}

/// A rolled key's secret, shown once.
#[derive(Debug, Template)]
#[template(path = "portal_key.html")]
pub struct PortalKeyPage {
    pub frame: PortalFrame,
    pub secret: String,
    pub old_start: String,
    /// "stops working at once", "stops working at 2026-…".
    pub old_expiry: String,
}

/// A message: link expired, session ended, not found, not allowed.
#[derive(Debug, Template)]
#[template(path = "portal_message.html")]
pub struct PortalMessagePage {
    pub frame: PortalFrame,
    pub title: String,
    pub message: String,
}

/// One portal as the dashboard edits it.
#[derive(Debug, Clone)]
pub struct PortalRow {
    pub id: String,
    pub slug: String,
    pub display_name: String,
    pub api_id: String,
    pub enabled: bool,
    /// Empty when none.
    pub logo_url: String,
    pub primary_color: String,
}

/// `/dashboard/portals`: the workspace's portals, each editable, and a form to create one.
#[derive(Debug, Template)]
#[template(path = "portals.html")]
pub struct PortalsPage {
    pub layout: crate::Layout,
    pub csrf: String,
    pub portals: Vec<PortalRow>,
    /// `(apiId, name)` of the APIs a portal can show.
    pub apis: Vec<(String, String)>,
    pub error: Option<String>,
}
