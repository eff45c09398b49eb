//! The dashboard's settings, as the configuration gives them, and its state in the server
//! (`config` and the server's state read them without reaching the rest of the dashboard).

/// The dashboard's state in the server: its settings, and the login attempts counted per
/// client address.
#[derive(Debug)]
pub struct Dashboard {
    pub settings: DashboardSettings,
    pub(super) logins: keygate_ratelimit::MemoryStore,
}

impl Dashboard {
    pub fn new(settings: DashboardSettings) -> Self {
        Self { settings, logins: keygate_ratelimit::MemoryStore::new() }
    }
}

/// The dashboard's settings (`KEYGATE_DASHBOARD*`).
#[derive(Debug, Clone)]
pub struct DashboardSettings {
    /// The path browsers see the dashboard at: `/dashboard`, or a proxy's prefix before it
    /// (links, form actions and the cookies' `Path` use it).
    pub base: String,
    /// `Secure` on every cookie, even when the request does not look like HTTPS.
    pub secure_cookies: bool,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self { base: "/dashboard".into(), secure_cookies: false }
    }
}
