//! keygate's dashboard views (docs/dashboard.md): askama templates compiled into the
//! binary, their view models, server-rendered SVG charts and the one stylesheet. No HTTP
//! here: the server's `dashboard` module extracts, calls the services and renders these.
//! Every value is escaped by askama's HTML escaper; nothing is marked safe.

pub use askama::Template;

pub mod portal;
pub mod webhooks;
pub use portal::{
    PortalFrame, PortalKey, PortalKeyPage, PortalKeysPage, PortalMessagePage, PortalRow, PortalsPage,
};
pub use webhooks::{
    AttemptRow, DeliveryPage, DeliveryRow, EventChoice, WebhookPage, WebhookRow, WebhookSecretPage,
    WebhooksPage,
};

/// The stylesheet, served at `<base>/assets/app.css`.
pub const APP_CSS: &str = include_str!("../assets/app.css");
/// The icon, at `<base>/assets/favicon.svg`.
pub const FAVICON_SVG: &str = include_str!("../assets/favicon.svg");
/// The one script (progressive enhancement: copy buttons), at `<base>/assets/app.js`.
pub const APP_JS: &str = include_str!("../assets/app.js");

/// What every page's frame needs.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Where the dashboard is served (`/dashboard`, or a proxy's prefix before it).
    pub base: String,
    /// The session's form token; `None` when signed out (no navigation then).
    pub csrf_token: Option<String>,
    /// The session's workspace, shown in the header.
    pub workspace: String,
}

impl Layout {
    /// The frame of a page seen signed out.
    pub fn signed_out(base: &str) -> Self {
        Self { base: base.to_string(), csrf_token: None, workspace: String::new() }
    }
}

/// The login form: a root key and the login's form token.
#[derive(Debug, Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub layout: Layout,
    pub csrf_token: String,
    pub error: Option<String>,
}

/// A page saying what went wrong (403, 404, 429...).
#[derive(Debug, Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub layout: Layout,
    pub title: String,
    pub message: String,
}

/// The overview: verifications of the range, as a chart and per outcome.
#[derive(Debug, Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub layout: Layout,
    /// `(value, label)` of each range the page offers.
    pub ranges: Vec<(&'static str, &'static str)>,
    pub range: String,
    pub chart: BarChart,
    /// `(outcome, count)`, every outcome.
    pub outcomes: Vec<(&'static str, u64)>,
    pub total: u64,
    /// The most verified keys: `(key id, total, valid)`.
    pub top_keys: Vec<(String, u64, u64)>,
    /// The most verified identities: `(id, externalId, total, valid)`.
    pub top_identities: Vec<(String, String, u64, u64)>,
    /// Rate-limit decisions per namespace, most denied first: `(namespace, passed, denied)`;
    /// `None` when the root key may not read them.
    pub limits: Option<Vec<(String, u64, u64)>>,
    /// The APIs counted when the root key may read only some (`api.<apiId>.read_analytics`);
    /// empty when it reads them all.
    pub scope: Vec<String>,
}

/// The workspace's APIs, and a form to create one.
#[derive(Debug, Template)]
#[template(path = "apis.html")]
pub struct ApisPage {
    pub layout: Layout,
    pub csrf: String,
    /// `(id, name)` of each API.
    pub apis: Vec<(String, String)>,
    pub error: Option<String>,
}

/// A key as a list shows it.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub id: String,
    pub name: String,
    pub start: String,
    pub enabled: bool,
}

/// An API: a page of its keys (filtered by identity), and a form to create one.
#[derive(Debug, Template)]
#[template(path = "api.html")]
pub struct ApiPage {
    pub layout: Layout,
    pub csrf: String,
    pub api_id: String,
    pub name: String,
    pub total: u64,
    /// The identity filter (`externalId`), empty for none.
    pub external_id: String,
    /// The search (a key id or part of a name), empty for none.
    pub search: String,
    pub keys: Vec<KeyRow>,
    /// The cursor of the next page.
    pub next: Option<String>,
    pub error: Option<String>,
}

/// A new key's secret, shown this once.
#[derive(Debug, Template)]
#[template(path = "key_created.html")]
pub struct KeyCreatedPage {
    pub layout: Layout,
    pub key_id: String,
    pub api_id: String,
    pub secret: String,
}

/// The workspace's root keys (a page at a time) with their actions, and a form to create
/// one with a permission picker.
#[derive(Debug, Template)]
#[template(path = "root_keys.html")]
pub struct RootKeysPage {
    pub layout: Layout,
    pub csrf: String,
    pub keys: Vec<RootKeyRow>,
    pub next: Option<String>,
    /// The workspace-wide permissions offered as checkboxes.
    pub choices: Vec<&'static str>,
    /// The signed-in root key (its own row has no disable, reroll or delete).
    pub own_id: String,
}

/// A root key as the list shows it.
#[derive(Debug, Clone)]
pub struct RootKeyRow {
    pub id: String,
    pub name: String,
    /// `start…end` of the secret.
    pub shown: String,
    pub enabled: bool,
    pub permissions: String,
    pub created: String,
    pub last_used: String,
    pub expires: String,
}

/// A new root key's secret, shown this once.
#[derive(Debug, Template)]
#[template(path = "root_key_created.html")]
pub struct RootKeyCreatedPage {
    pub layout: Layout,
    pub key_id: String,
    pub secret: String,
}

/// A recoverable key revealed (`plaintext`), or why not: shown once, never cached.
#[derive(Debug, Template)]
#[template(path = "key_revealed.html")]
pub struct KeyRevealedPage {
    pub layout: Layout,
    pub key_id: String,
    pub plaintext: Option<String>,
}

/// A key: what it is and holds, and what can be done to it.
#[derive(Debug, Template)]
#[template(path = "key.html")]
pub struct KeyPage {
    pub layout: Layout,
    pub csrf: String,
    pub key: KeyRow,
    pub api_id: Option<String>,
    /// "unlimited", or the uses left.
    pub credits: String,
    /// The identity's externalId, or "none".
    pub identity: String,
    pub permissions: Vec<String>,
    /// The permissions linked to the key itself (not through roles): what its form edits.
    pub direct_permissions: Vec<String>,
    pub roles: Vec<String>,
    /// The credits field's value: the uses left, or empty for unlimited.
    pub credits_value: String,
    /// Its own rate limits, and its credits' refill, as text.
    pub limits: Vec<String>,
    pub refill: String,
    /// Its verifications of the last 30 days; `None` when the root key may not read them.
    pub usage: Option<BarChart>,
    pub usage_total: u64,
}

/// The workspace's permissions, and forms to create and delete them.
#[derive(Debug, Template)]
#[template(path = "permissions.html")]
pub struct PermissionsPage {
    pub layout: Layout,
    pub csrf: String,
    /// `(id, name, description)`.
    pub permissions: Vec<(String, String, String)>,
}

/// The workspace's roles, each with its permissions (editable), and a form to create one.
#[derive(Debug, Template)]
#[template(path = "roles.html")]
pub struct RolesPage {
    pub layout: Layout,
    pub csrf: String,
    /// `(id, name, permission names)`.
    pub roles: Vec<(String, String, Vec<String>)>,
}

/// The workspace's identities (searched, a page at a time), and a form to create one.
#[derive(Debug, Template)]
#[template(path = "identities.html")]
pub struct IdentitiesPage {
    pub layout: Layout,
    pub csrf: String,
    pub search: String,
    /// `(id, externalId, rate limits as text)`.
    pub identities: Vec<(String, String, String)>,
    pub next: Option<String>,
}

/// An identity: its meta and rate limits, editable.
#[derive(Debug, Template)]
#[template(path = "identity.html")]
pub struct IdentityPage {
    pub layout: Layout,
    pub csrf: String,
    pub id: String,
    pub external_id: String,
    /// The meta as JSON text (empty: none).
    pub meta: String,
    /// One line per limit: `name limit duration [auto] [algorithm]`.
    pub ratelimits: Vec<String>,
}

/// A namespace's overrides, and forms to set and delete them.
#[derive(Debug, Template)]
#[template(path = "ratelimits.html")]
pub struct RatelimitsPage {
    pub layout: Layout,
    pub csrf: String,
    /// The namespace asked for (empty: none yet).
    pub namespace: String,
    /// `(identifier, limit, duration)`.
    pub overrides: Vec<(String, u64, u64)>,
    /// The namespace's algorithm (`fixed`, `sliding`, `token_bucket`), when the root key
    /// may read it (empty otherwise).
    pub algorithm: String,
    /// The workspace's namespaces and their algorithms, when the root key may list them.
    pub namespaces: Vec<(String, String)>,
}

/// The audit log, filtered, a page at a time.
#[derive(Debug, Template)]
#[template(path = "audit.html")]
pub struct AuditPage {
    pub layout: Layout,
    pub action: String,
    pub actor: String,
    pub resource: String,
    /// `(when, action, resource, actor)`, newest first.
    pub events: Vec<(String, String, String, String)>,
    /// The link to the next (older) page.
    pub next: Option<String>,
}

/// One bucket of a chart: when, how many were valid and not, and the credits they were
/// charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub label: String,
    pub valid: u64,
    pub other: u64,
    pub spent: u64,
}

/// A stacked bar chart laid out for SVG (valid at the bottom, the rest above).
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub width: u32,
    pub height: u32,
    /// The y of the axis.
    pub base: u32,
    pub bar_width: u32,
    /// "hour" or "day".
    pub slice: &'static str,
    pub bars: Vec<Bar>,
    pub first: String,
    pub last: String,
    /// What the chart shows, for screen readers (`aria-label`).
    pub label: String,
    /// The credits charged over the whole range.
    pub spent: u64,
}

/// One bar, placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub x: u32,
    pub label: String,
    pub valid: u64,
    pub other: u64,
    pub spent: u64,
    pub valid_y: u32,
    pub valid_h: u32,
    pub other_y: u32,
    pub other_h: u32,
}

impl BarChart {
    const WIDTH: u32 = 720;
    const HEIGHT: u32 = 180;
    const LABELS: u32 = 14;

    /// The chart of `buckets` (every slot of the range, in order, empty ones included).
    pub fn new(slice: &'static str, buckets: &[Bucket]) -> Self {
        let base = Self::HEIGHT - Self::LABELS;
        let n = buckets.len().max(1) as u32;
        let slot = Self::WIDTH / n;
        let bar_width = (slot * 4 / 5).max(1);
        let max = buckets.iter().map(|b| b.valid + b.other).max().unwrap_or(0).max(1);
        let scale = |v: u64| ((v as f64 / max as f64) * f64::from(base - 4)).round() as u32;
        let bars = buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (valid_h, other_h) = (scale(b.valid), scale(b.other));
                Bar {
                    x: i as u32 * slot + (slot - bar_width) / 2,
                    label: b.label.clone(),
                    valid: b.valid,
                    other: b.other,
                    spent: b.spent,
                    valid_y: base - valid_h,
                    valid_h,
                    other_y: base - valid_h - other_h,
                    other_h,
                }
            })
            .collect();
        Self {
            width: Self::WIDTH,
            height: Self::HEIGHT,
            base,
            bar_width,
            slice,
            bars,
            first: buckets.first().map(|b| b.label.clone()).unwrap_or_default(),
            last: buckets.last().map(|b| b.label.clone()).unwrap_or_default(),
            label: format!(
                "Verifications per {slice}: {} in all",
                buckets.iter().map(|b| b.valid + b.other).sum::<u64>()
            ),
            spent: buckets.iter().map(|b| b.spent).sum(),
        }
    }

    /// The chart with another `aria-label`.
    pub fn labelled(mut self, label: String) -> Self {
        self.label = label;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout { base: "/dashboard".into(), csrf_token: Some("tok".into()), workspace: "acme".into() }
    }

    #[test]
    fn values_are_escaped() {
        let page = ErrorPage {
            layout: layout(),
            title: "<script>alert(1)</script>".into(),
            message: "\"quoted\" & <b>bold</b>".into(),
        };
        let html = page.render().unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<b>bold</b>"));
    }

    #[test]
    fn a_login_page_has_its_token_and_a_labelled_field_and_no_navigation() {
        let page =
            LoginPage { layout: Layout::signed_out("/dashboard"), csrf_token: "abc".into(), error: None };
        let html = page.render().unwrap();
        assert!(html.contains(r#"name="csrf_token" value="abc""#));
        assert!(
            html.contains(r#"<label for="root_key">"#) && html.contains(r#"id="root_key" name="root_key""#)
        );
        assert!(!html.contains("Log out"));
        assert_eq!(html.matches("<h1>").count(), 1);
    }

    #[test]
    fn bars_stack_within_the_chart() {
        let buckets = [
            Bucket { label: "a".into(), valid: 10, other: 0, spent: 30 },
            Bucket { label: "b".into(), valid: 5, other: 5, spent: 0 },
            Bucket { label: "c".into(), valid: 0, other: 0, spent: 0 },
        ];
        let c = BarChart::new("hour", &buckets);
        assert_eq!(c.bars.len(), 3);
        assert_eq!(c.bars[0].valid_y, 4, "the tallest bar reaches the top margin");
        assert_eq!(c.bars[1].valid_h + c.bars[1].other_h, c.bars[0].valid_h);
        assert_eq!((c.bars[2].valid_h, c.bars[2].other_h), (0, 0));
        assert!(c.bars.iter().all(|b| b.x + c.bar_width <= c.width));
        assert_eq!((c.first.as_str(), c.last.as_str()), ("a", "c"));
    }
}
